// The single-byte-flip campaign (issue 15): every byte of every file of a
// small committed checkpoint (native and DCP) is flipped in turn, and the
// checkpoint is loaded under the topology that saved it and under another
// one. Each load must either fail with a CheckpointError naming the damaged
// file, or return exactly the saved values; never crash, never hang, never
// return other values.
//
// Both loads use the default policy (kWhenWhole): native v2 verifies partial
// reads per block, DCP reads a partially needed record whole to check its
// CRC32 (FORMAT.md).
//
// DISTCKPT_FLIP_STRIDE=n flips every n-th byte (default 7: a sample for the
// default suite); the `slow` test byte_flip_full runs n = 1, every byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/dcp/dcp_format.h"
#include "io/testing.h"
#include "mapping/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

const Shape kGlobal{6, 12};

// value = linear index, as f32; rank `part` of `parts` holds a slab along `axis`.
ShardedTensor Slab(const std::string& key, int axis, int part, int parts, bool with_data = true) {
  return distckpt::Slab(key, kGlobal, axis, part, parts, with_data);
}

Node State(int rank, int world, int axis, bool with_data) {
  Dict d;
  d["w"] = Node(Slab("w", axis, rank, world, with_data));
  d["v"] = Node(Slab("v", 1 - axis, rank, world, with_data));
  d["iteration"] = Node(nlohmann::json(7));
  return Node(std::move(d));
}

bool HoldsSavedValues(const Node& loaded, int rank, int world, int axis) {
  Node want = State(rank, world, axis, true);
  for (const char* key : {"w", "v"}) {
    if (!loaded.at(key).as<Tensor>().Equals(want.at(key).as<ShardedTensor>().data)) return false;
  }
  return loaded.at("iteration").as<nlohmann::json>() == 7;
}

struct Counts {
  int flips = 0;
  int loads = 0;
  int identical = 0;
  int detected = 0;
  std::vector<std::string> problems;  // wrong values, foreign exceptions, unnamed files
};

// Loads `dir` on `world` ranks (slabs along `axis`) and classifies the outcome.
void LoadAndClassify(const std::string& dir, const std::string& file, int world, int axis,
                     VerifyPolicy verify, Counts& counts) {
  ++counts.loads;
  std::vector<RankOutcome> outcomes = RunRanksCollect(world, [&](Communicator& comm) {
    LoadOptions options;
    options.verify = verify;
    LoadResult r = Load(State(comm.rank(), world, axis, false), dir, comm, options);
    if (!HoldsSavedValues(r.state_dict, comm.rank(), world, axis)) {
      throw std::logic_error("WRONG VALUES");
    }
  });
  std::string error;
  bool checkpoint_error = false;
  for (const RankOutcome& o : outcomes) {
    if (!o.error) continue;
    try {
      std::rethrow_exception(o.error);
    } catch (const CheckpointError& e) {
      if (error.empty()) error = e.what(), checkpoint_error = true;
    } catch (const std::exception& e) {
      error = e.what();
      checkpoint_error = false;
      break;
    }
  }
  const std::string where = fmt::format("{} world {}: ", file, world);
  if (error.empty()) {
    ++counts.identical;
  } else if (!checkpoint_error) {
    counts.problems.push_back(where + error);
  } else if (error.find(file) == std::string::npos) {
    counts.problems.push_back(where + "error does not name the file: " + error);
  } else {
    ++counts.detected;
  }
}

Counts Campaign(const Format& format, int stride) {
  ScopedTempDir tmp;
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  RunRanks(2, [&](Communicator& comm) {
    SaveOptions options;
    options.format = &format;
    Save(State(comm.rank(), 2, 0, true), dir, comm, options);
  });
  const VerifyPolicy resharded_verify = VerifyPolicy::kWhenWhole;  // the default, for both
  Counts counts;
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    const std::string path = JoinPath(dir, file);
    std::string original = ReadFileToString(Env::Default(), path);
    for (size_t at = 0; at < original.size(); at += stride) {
      std::string damaged = original;
      damaged[at] = static_cast<char>(damaged[at] ^ 0xff);
      {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
      }
      ++counts.flips;
      LoadAndClassify(dir, file, 2, 0, VerifyPolicy::kWhenWhole, counts);  // the saving topology
      // Another one: resharded, partial reads.
      LoadAndClassify(dir, file, 3, 1, resharded_verify, counts);
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(original.data(), static_cast<std::streamsize>(original.size()));
  }
  return counts;
}

int Stride() {
  const char* s = std::getenv("DISTCKPT_FLIP_STRIDE");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 7;
}

class ByteFlipTest : public testing::TestWithParam<const Format*> {};

TEST_P(ByteFlipTest, EveryFlipIsDetectedOrHarmless) {
  const Counts counts = Campaign(*GetParam(), Stride());
  std::printf(
      "byte flips (%s, stride %d): %d flips, %d loads: %d detected naming the file, %d "
      "identical values, %zu problems\n",
      std::string(GetParam()->name()).c_str(), Stride(), counts.flips, counts.loads,
      counts.detected, counts.identical, counts.problems.size());
  for (size_t i = 0; i < counts.problems.size(); ++i) {
    std::printf("problem: %s\n", counts.problems[i].c_str());
    if (i < 20) ADD_FAILURE() << counts.problems[i];
  }
  EXPECT_EQ(counts.loads, 2 * counts.flips);
  EXPECT_EQ(counts.detected + counts.identical, counts.loads);
  EXPECT_GT(counts.detected, counts.flips / 2);  // most flips are caught, not ignored
}

auto FormatName = [](const testing::TestParamInfo<const Format*>& info) {
  return std::string(info.param == &NativeFormat() ? "native" : "dcp");
};
INSTANTIATE_TEST_SUITE_P(Formats, ByteFlipTest, testing::Values(&NativeFormat(), &DcpFormat()),
                         FormatName);

}  // namespace
}  // namespace distckpt
