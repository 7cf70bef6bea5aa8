// The counterexample files are faithful: every generated scenario written by
// Scenario::ToJson parses back (Scenario::FromJson) to the same scenario.
#include <gtest/gtest.h>

#include "property/generators.h"
#include "property/harness.h"

namespace distckpt {
namespace {

bool SameTensor(const TensorSpec& a, const TensorSpec& b) {
  return a.key == b.key && a.shape == b.shape && a.dtype == b.dtype && a.shard == b.shard &&
         a.split == b.split && a.flatten == b.flatten && a.flatten_jitter == b.flatten_jitter &&
         a.pad_multiple == b.pad_multiple && a.load_dtype == b.load_dtype && a.replica == b.replica;
}

TEST(ScenarioJsonProperty, CounterexampleFilesParseBackToTheSameScenario) {
  CheckProperty({500}, [] {
    const Scenario s = *GenReshardScenario(GenLimits{});
    const Scenario back = Scenario::FromJson(s.ToJson("note"), "generated");
    RC_ASSERT(back.name == s.name);
    RC_ASSERT(back.seed == s.seed);
    RC_ASSERT(back.topologies == s.topologies);
    RC_ASSERT(back.tensors.size() == s.tensors.size());
    for (size_t i = 0; i < s.tensors.size(); ++i)
      RC_ASSERT(SameTensor(back.tensors[i], s.tensors[i]));
    RC_ASSERT(back.objects.size() == s.objects.size());
    for (size_t i = 0; i < s.objects.size(); ++i) {
      RC_ASSERT(back.objects[i].key == s.objects[i].key);
      RC_ASSERT(back.objects[i].per == s.objects[i].per);
    }
    RC_ASSERT(back.pairs.size() == 1u);
    RC_ASSERT(back.pairs[0].save == s.pairs[0].save);
    RC_ASSERT(back.pairs[0].load == s.pairs[0].load);
    RC_ASSERT(back.fsdp == s.fsdp);
    RC_ASSERT(back.pairs[0].load_fsdp == s.pairs[0].load_fsdp);
    RC_ASSERT(back.ToJson("note") == s.ToJson("note"));
    // The topology strings themselves round-trip.
    for (const std::string& t : s.topologies) RC_ASSERT(Topology::Parse(t).ToString() == t);
  });
}

}  // namespace
}  // namespace distckpt
