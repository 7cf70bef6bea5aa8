// TrainLoop's error reporting (issue 39): an async save whose writes failed
// (a full disk) is reported, not the next save's failure that it caused.
#include "harness/tools/train.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "core/error.h"
#include "io/fault_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using testing::HasSubstr;
using testing::Not;

Scenario Tiny() {
  return Scenario::FromJson(
      {{"name", "tiny"},
       {"tensors", {{{"key", "w"}, {"shape", {64, 64}}, {"shard", {{"0", "tp"}}}}}}},
      "tiny");
}

TEST(TrainLoopTest, AsyncWriteFailureIsReportedBeforeTheNextSavesFailure) {
  for (int round = 0; round < 5; ++round) {  // the writers race the next step
    ScopedTempDir tmp;
    FaultInjectionEnv env(Env::Default());
    env.FailWritesAfter(1000);  // iteration 1's data files do not fit
    // Iteration 2's save fails at once, in its directory's preparation.
    env.FailPathsContaining("iter_0000002");
    TrainOptions options;
    options.manager.root = tmp.path();
    options.manager.async = true;
    options.manager.topology = "tp=2";
    options.manager.save_contents = {"model"};
    options.manager.save.env = &env;
    options.steps = 2;
    options.load_contents = {"model"};
    std::vector<std::string> errors(2);
    RunRanks(2, [&](Communicator& comm) {
      try {
        TrainLoop(Tiny(), options, comm);
      } catch (const CheckpointError& e) {
        errors[comm.rank()] = e.what();
      }
    });
    for (const std::string& e : errors) {
      // The write that failed first, in iteration 1's directory; the later
      // failure after it.
      EXPECT_THAT(e, HasSubstr("iter_0000001")) << e;
      EXPECT_THAT(e.substr(0, e.find("iter_0000002")), HasSubstr("iter_0000001")) << e;
    }
  }
}

}  // namespace
}  // namespace distckpt
