// Tests of StrictHandling: names, predicates, the report text and the
// handling matrix of Megatron's TestNonStrictLoad (#68 unexpected keys,
// #69 missing keys, #70 exact request) as unit tests of ApplyStrictHandling.
#include "mapping/strict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mapping/dict_utils.h"
#include "mapping/testing.h"

namespace distckpt {
namespace {

using testing::HasSubstr;
using testing::IsEmpty;
using testing::Not;
using Keys = std::set<std::string>;

constexpr StrictHandling kAll[] = {StrictHandling::kAssumeOkUnexpected,
                                   StrictHandling::kLogUnexpected,
                                   StrictHandling::kLogAll,
                                   StrictHandling::kRaiseUnexpected,
                                   StrictHandling::kRaiseAll,
                                   StrictHandling::kReturnUnexpected,
                                   StrictHandling::kReturnAll,
                                   StrictHandling::kIgnoreAll};

const Keys kCheckpointKeys = {"TenA", "TenB", "TenC", "ObjA", "ObjB"};

// A request holding a ShardedTensor or ShardedObject (names starting with
// "Obj" or "UnexpectedObj") for each key.
Node Request(const Keys& keys) {
  Node sd;
  for (const std::string& key : keys) {
    if (key.find("Obj") != std::string::npos) {
      sd["sd_" + key] = Node(ShardedObject{key, nlohmann::json(1), {1}, {0}});
    } else {
      sd["sd_" + key] = Node(ShardedTensor::FromRankOffsets(key, Arange({2}), {}));
    }
  }
  return sd;
}

Keys RequestedKeys(const Node& sd) {
  Keys keys;
  ForEachLeaf(sd, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) keys.insert(t->key);
    if (const ShardedObject* o = leaf.get_if<ShardedObject>()) keys.insert(o->key);
  });
  return keys;
}

struct Outcome {
  KeyMismatch returned;
  std::string log;
  std::string error;  // empty when nothing was raised
  Keys left;          // keys still requested afterwards
};

Outcome Apply(StrictHandling strict, const Keys& request, const Keys& all_ranks) {
  Outcome out;
  Node sd = Request(request);
  try {
    out.returned = ApplyStrictHandling(strict, sd, kCheckpointKeys, all_ranks, &out.log);
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kKeyMismatch);
    out.error = e.what();
  }
  out.left = RequestedKeys(sd);
  return out;
}

TEST(StrictTest, NamesRoundTrip) {
  for (StrictHandling s : kAll) EXPECT_EQ(ParseStrictHandling(StrictHandlingName(s)), s);
  EXPECT_EQ(StrictHandlingName(StrictHandling::kAssumeOkUnexpected), "assume_ok_unexpected");
  EXPECT_EQ(ParseStrictHandling("raise_all"), StrictHandling::kRaiseAll);
  for (const char* bad : {"RAISE_ALL", "true", ""}) {
    EXPECT_THAT(ErrorMessage(ErrorKind::kInvalidArgument, [&] { ParseStrictHandling(bad); }),
                HasSubstr(std::string("Invalid strict flag: '") + bad + "'"));
  }
}

TEST(StrictTest, Predicates) {
  const Keys global = {"log_all", "raise_all", "return_all", "ignore_all"};
  const Keys returning = {"return_unexpected", "return_all"};
  for (StrictHandling s : kAll) {
    const std::string name(StrictHandlingName(s));
    EXPECT_EQ(RequiresExplicitCkptMismatchCheck(s), name != "assume_ok_unexpected") << name;
    EXPECT_EQ(RequiresGlobalAppMetadata(s), global.count(name) > 0) << name;
    EXPECT_EQ(RequiresReturningMismatchKeys(s), returning.count(name) > 0) << name;
  }
}

TEST(StrictTest, MismatchReportText) {
  EXPECT_EQ(MismatchReport({}), "");
  EXPECT_EQ(MismatchReport({{"a"}, {"c", "b"}}),
            "Some keys found in the checkpoint are missing in the provided sharded state dict. "
            "Unexpected keys (not found in the checkpoint) encountered in the provided sharded "
            "state dict. "
            "\nMissing keys (for all ranks): {'a'}. Unexpected keys (for this rank): {'b', 'c'}. ");
  EXPECT_EQ(MismatchReport({{}, {"x"}}),
            "Unexpected keys (not found in the checkpoint) encountered in the provided sharded "
            "state dict. "
            "\nUnexpected keys (for this rank): {'x'}. ");
}

// #68: the request adds UnexpectedTenD and UnexpectedObjD.
TEST(StrictTest, UnexpectedKeysMatrix) {
  Keys request = kCheckpointKeys;
  request.insert({"UnexpectedTenD", "UnexpectedObjD"});
  for (StrictHandling s : kAll) {
    SCOPED_TRACE(StrictHandlingName(s));
    const Outcome out = Apply(s, request, request);
    const std::string name(StrictHandlingName(s));
    const bool removes = s != StrictHandling::kAssumeOkUnexpected && out.error.empty();
    EXPECT_EQ(out.left, removes ? kCheckpointKeys : request);
    if (name.rfind("raise", 0) == 0) {
      EXPECT_THAT(out.error, HasSubstr("Unexpected keys"));
      EXPECT_THAT(out.error, HasSubstr("'UnexpectedObjD', 'UnexpectedTenD'"));
      EXPECT_THAT(out.error, Not(HasSubstr("Missing keys")));
    } else {
      EXPECT_THAT(out.error, IsEmpty());
    }
    if (name.rfind("log", 0) == 0) {
      EXPECT_THAT(
          out.log,
          HasSubstr("Unexpected keys (for this rank): {'UnexpectedObjD', 'UnexpectedTenD'}"));
      EXPECT_THAT(out.log, Not(HasSubstr("Missing keys")));
    } else {
      EXPECT_THAT(out.log, IsEmpty());
    }
    const Keys expected_unexpected =
        RequiresReturningMismatchKeys(s) ? Keys{"UnexpectedObjD", "UnexpectedTenD"} : Keys{};
    EXPECT_EQ(out.returned.unexpected, expected_unexpected);
    EXPECT_THAT(out.returned.missing, IsEmpty());
  }
}

// #69: no rank requests TenA and ObjB.
TEST(StrictTest, MissingKeysMatrix) {
  const Keys request = {"TenB", "TenC", "ObjA"};
  for (StrictHandling s : kAll) {
    SCOPED_TRACE(StrictHandlingName(s));
    const Outcome out = Apply(s, request, request);
    EXPECT_EQ(out.left, request);
    if (s == StrictHandling::kRaiseAll) {
      EXPECT_THAT(out.error, HasSubstr("Missing keys (for all ranks): {'ObjB', 'TenA'}"));
      EXPECT_THAT(out.error, Not(HasSubstr("Unexpected keys")));
    } else {
      EXPECT_THAT(out.error, IsEmpty());
    }
    if (s == StrictHandling::kLogAll) {
      EXPECT_THAT(out.log, HasSubstr("Some keys found in the checkpoint are missing"));
      EXPECT_THAT(out.log, HasSubstr("'ObjB', 'TenA'"));
      EXPECT_THAT(out.log, Not(HasSubstr("Unexpected keys")));
    } else {
      EXPECT_THAT(out.log, IsEmpty());
    }
    EXPECT_EQ(out.returned.missing,
              (s == StrictHandling::kReturnAll ? Keys{"ObjB", "TenA"} : Keys{}));
    EXPECT_THAT(out.returned.unexpected, IsEmpty());
  }
}

// Missing keys are global: a key another rank requests is not missing.
TEST(StrictTest, MissingKeysUseAllRanksRequests) {
  const Outcome out =
      Apply(StrictHandling::kReturnAll, {"TenB"}, {"TenA", "TenB", "TenC", "ObjA", "ObjB"});
  EXPECT_THAT(out.returned.missing, IsEmpty());
}

// #70: an exact request passes every mode untouched.
TEST(StrictTest, ExactRequestMatrix) {
  for (StrictHandling s : kAll) {
    SCOPED_TRACE(StrictHandlingName(s));
    const Outcome out = Apply(s, kCheckpointKeys, kCheckpointKeys);
    EXPECT_THAT(out.error, IsEmpty());
    EXPECT_THAT(out.log, IsEmpty());
    EXPECT_EQ(out.left, kCheckpointKeys);
    EXPECT_THAT(out.returned.missing, IsEmpty());
    EXPECT_THAT(out.returned.unexpected, IsEmpty());
  }
}

TEST(StrictTest, RemovalReachesNestedLeaves) {
  Node sd;
  sd["nested"]["d"] = Node(ShardedTensor::FromRankOffsets("UnexpectedTenD", Arange({2}), {}));
  sd["l"] = Node(List{Node(ShardedTensor::FromRankOffsets("TenA", Arange({2}), {})),
                      Node(ShardedObject{"UnexpectedObjD", nlohmann::json(1), {1}, {0}})});
  const KeyMismatch m =
      ApplyStrictHandling(StrictHandling::kReturnUnexpected, sd, kCheckpointKeys, {}, nullptr);
  EXPECT_EQ(m.unexpected, (Keys{"UnexpectedObjD", "UnexpectedTenD"}));
  EXPECT_EQ(RequestedKeys(sd), Keys{"TenA"});
  EXPECT_FALSE(sd.as<Dict>().count("nested"));
  EXPECT_EQ(sd.at("l").as<List>().size(), 1u);
}

}  // namespace
}  // namespace distckpt
