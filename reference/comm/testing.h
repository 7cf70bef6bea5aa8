// Test helpers shared by the comm/ tests of every backend: deterministic
// per-rank payloads and one check per collective that any Communicator
// (threads, MPI) must pass. Each Expect* function is itself collective: every
// rank of `comm` calls it with the same arguments. Failures are reported with
// EXPECT_* (never an early return), so a failing rank still joins the
// remaining collectives and the other ranks do not hang.
//
// Thread-safety: each call uses only the communicator passed in.
#ifndef DISTCKPT_COMM_TESTING_H_
#define DISTCKPT_COMM_TESTING_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"

namespace distckpt {

// `length` bytes that `rank` contributes; different for every (rank, salt).
inline std::string TestPayload(int rank, size_t length, int salt = 0) {
  std::string bytes(length, '\0');
  for (size_t i = 0; i < length; ++i) {
    bytes[i] = static_cast<char>(i * 131 + (i >> 9) + rank * 7 + salt * 29 + 1);
  }
  return bytes;
}

// Payload length of `rank` in the variable-size checks: every third rank
// sends nothing, the others send different lengths around `base`.
inline size_t VariedLength(int rank, size_t base) { return rank % 3 == 1 ? 0 : base + 17 * rank; }

// Compares payloads without printing megabytes on failure.
inline ::testing::AssertionResult SameBytes(const std::string& actual,
                                            const std::string& expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  const auto diff = std::mismatch(actual.begin(), actual.end(), expected.begin(), expected.end());
  return ::testing::AssertionFailure()
         << "got " << actual.size() << " bytes, expected " << expected.size()
         << "; first difference at byte " << (diff.first - actual.begin());
}

// Nobody leaves a barrier before the last rank (rank 0, late on purpose) has
// entered it. Assumes the ranks share one host's steady clock.
inline void ExpectBarrierWorks(Communicator& comm) {
  using Clock = std::chrono::steady_clock;
  comm.Barrier();
  int64_t entered = 0;
  if (comm.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    entered = Clock::now().time_since_epoch().count();
  }
  comm.Barrier();
  const int64_t left = Clock::now().time_since_epoch().count();
  EXPECT_GE(left, comm.AllReduceOne(entered, ReduceOp::kMax)) << "rank " << comm.rank();
}

inline void ExpectBroadcastWorks(Communicator& comm, size_t length) {
  for (int root = 0; root < comm.size(); ++root) {
    std::string bytes = comm.rank() == root ? TestPayload(root, length, 1) : "stale";
    comm.Broadcast(bytes, root);
    EXPECT_TRUE(SameBytes(bytes, TestPayload(root, length, 1)))
        << "rank " << comm.rank() << " root " << root;
    // In place: the same length on every rank, stale bytes on the receivers.
    std::string in_place =
        comm.rank() == root ? TestPayload(root, length, 2) : std::string(length, 'x');
    comm.BroadcastBytes(std::as_writable_bytes(std::span(in_place)), root);
    EXPECT_TRUE(SameBytes(in_place, TestPayload(root, length, 2)))
        << "BroadcastBytes: rank " << comm.rank() << " root " << root;
  }
}

// Gather to the first and the last rank of payloads of VariedLength(rank, base).
inline void ExpectGatherWorks(Communicator& comm, size_t base) {
  for (int root : {0, comm.size() - 1}) {
    const std::vector<std::string> out =
        comm.Gather(TestPayload(comm.rank(), VariedLength(comm.rank(), base)), root);
    if (comm.rank() != root) {
      EXPECT_TRUE(out.empty()) << "rank " << comm.rank();
      continue;
    }
    EXPECT_EQ(out.size(), static_cast<size_t>(comm.size()));
    for (size_t r = 0; r < out.size(); ++r) {
      EXPECT_TRUE(SameBytes(out[r], TestPayload(r, VariedLength(r, base)))) << "from rank " << r;
    }
  }
}

inline void ExpectAllGatherWorks(Communicator& comm, size_t base) {
  const std::vector<std::string> out =
      comm.AllGather(TestPayload(comm.rank(), VariedLength(comm.rank(), base), 2));
  EXPECT_EQ(out.size(), static_cast<size_t>(comm.size()));
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_TRUE(SameBytes(out[r], TestPayload(r, VariedLength(r, base), 2)))
        << "rank " << comm.rank() << " from rank " << r;
  }
}

// AllReduce (int64, negative values included) and AllReduceBytes (unsigned,
// sums wrap modulo 256) of `count` elements, for every ReduceOp.
inline void ExpectAllReduceWorks(Communicator& comm, size_t count) {
  auto int_value = [](int rank, size_t i) -> int64_t {
    return (rank + 1) * (static_cast<int64_t>(i % 7) - 3) + static_cast<int64_t>(i) * 1000003;
  };
  auto byte_value = [](int rank, size_t i) -> uint8_t { return (rank * 37 + i * 11 + 200) & 0xff; };
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum}) {
    std::vector<int64_t> ints(count);
    std::vector<uint8_t> bytes(count);
    for (size_t i = 0; i < count; ++i) {
      ints[i] = int_value(comm.rank(), i);
      bytes[i] = byte_value(comm.rank(), i);
    }
    comm.AllReduce(ints, op);
    comm.AllReduceBytes(bytes, op);
    size_t wrong_ints = 0;
    size_t wrong_bytes = 0;
    std::vector<int64_t> int_inputs;
    std::vector<uint8_t> byte_inputs;
    for (size_t i = 0; i < count; ++i) {
      int_inputs.clear();
      byte_inputs.clear();
      for (int r = 0; r < comm.size(); ++r) {
        int_inputs.push_back(int_value(r, i));
        byte_inputs.push_back(byte_value(r, i));
      }
      int64_t int_expected = 0;
      unsigned byte_expected = 0;
      if (op == ReduceOp::kMin) {
        int_expected = *std::min_element(int_inputs.begin(), int_inputs.end());
        byte_expected = *std::min_element(byte_inputs.begin(), byte_inputs.end());
      } else if (op == ReduceOp::kMax) {
        int_expected = *std::max_element(int_inputs.begin(), int_inputs.end());
        byte_expected = *std::max_element(byte_inputs.begin(), byte_inputs.end());
      } else {
        for (int64_t v : int_inputs) int_expected += v;
        for (unsigned v : byte_inputs) byte_expected += v;
      }
      wrong_ints += ints[i] != int_expected;
      wrong_bytes += bytes[i] != (byte_expected & 0xff);
    }
    EXPECT_EQ(wrong_ints, 0u) << "AllReduce op " << static_cast<int>(op) << " count " << count;
    EXPECT_EQ(wrong_bytes, 0u) << "AllReduceBytes op " << static_cast<int>(op) << " count "
                               << count;
  }
}

// The members (indices of `colors_keys`) that Split puts in `color`'s group,
// in their new rank order: by (key, old rank).
inline std::vector<int> ExpectedSplit(const std::vector<std::pair<int, int>>& colors_keys,
                                      int color) {
  std::vector<std::pair<int, int>> keyed;  // (key, old rank)
  for (size_t r = 0; r < colors_keys.size(); ++r) {
    if (colors_keys[r].first == color) keyed.emplace_back(colors_keys[r].second, r);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  for (const auto& [key, r] : keyed) members.push_back(r);
  return members;
}

// The world ranks of `comm`'s members, in rank order, as seen by every rank.
inline std::vector<int> MemberIds(Communicator& comm, int my_id) {
  std::vector<int> ids;
  for (const std::string& id : comm.AllGather(std::to_string(my_id))) ids.push_back(std::stoi(id));
  return ids;
}

// Split by parity with reversed keys (the last rank opts out), then split
// each group again into pairs with swapped keys.
inline void ExpectSplitWorks(Communicator& comm) {
  const int n = comm.size();
  std::vector<std::pair<int, int>> outer(n);
  for (int r = 0; r < n; ++r) outer[r] = {r == n - 1 && n > 1 ? -1 : r % 2, -r};
  const auto [color, key] = outer[comm.rank()];
  std::unique_ptr<Communicator> sub = comm.Split(color, key);
  if (color < 0) {
    EXPECT_EQ(sub, nullptr);
    return;
  }
  if (sub == nullptr) {
    ADD_FAILURE() << "rank " << comm.rank() << " got no group for color " << color;
    return;
  }
  const std::vector<int> members = ExpectedSplit(outer, color);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub->rank()], comm.rank());
  EXPECT_EQ(MemberIds(*sub, comm.rank()), members);

  std::vector<std::pair<int, int>> inner(sub->size());
  for (int r = 0; r < sub->size(); ++r) inner[r] = {r / 2, r % 2 == 0 ? 1 : 0};
  const auto [inner_color, inner_key] = inner[sub->rank()];
  std::unique_ptr<Communicator> pair = sub->Split(inner_color, inner_key);
  if (pair == nullptr) {
    ADD_FAILURE() << "rank " << comm.rank() << " got no nested group";
    return;
  }
  std::vector<int> expected;
  for (int r : ExpectedSplit(inner, inner_color)) expected.push_back(members[r]);
  EXPECT_EQ(MemberIds(*pair, comm.rank()), expected);
  int64_t sum = 0;
  for (int id : expected) sum += id;
  EXPECT_EQ(pair->AllReduceOne(comm.rank(), ReduceOp::kSum), sum);
}

// Subgroup of the even ranks listed in descending order; a bad list throws
// kInvalidArgument on every rank without communicating.
inline void ExpectSubgroupWorks(Communicator& comm) {
  std::vector<int> list;
  for (int r = comm.size() - 1; r >= 0; --r) {
    if (r % 2 == 0) list.push_back(r);
  }
  std::unique_ptr<Communicator> sub = comm.Subgroup(list);
  const auto it = std::find(list.begin(), list.end(), comm.rank());
  if (it == list.end()) {
    EXPECT_EQ(sub, nullptr);
  } else if (sub != nullptr) {
    EXPECT_EQ(sub->rank(), it - list.begin());
    EXPECT_EQ(MemberIds(*sub, comm.rank()), list);
  } else {
    ADD_FAILURE() << "rank " << comm.rank() << " got no sub-group";
  }
  for (const std::vector<int>& bad : {std::vector<int>{comm.size()}, std::vector<int>{0, 0}}) {
    try {
      comm.Subgroup(bad);
      ADD_FAILURE() << "Subgroup accepted a bad list";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    }
  }
}

// Ranks in `failing` throw (even ranks a CheckpointError(kIo), odd ranks a
// std::runtime_error); every rank must see the same verdict.
inline void ExpectAgreeOnOutcomeWorks(Communicator& comm, const std::vector<int>& failing) {
  std::string expected_message;
  for (int r : failing) {
    if (!expected_message.empty()) expected_message += "; ";
    expected_message += fmt::format("rank {}: boom {}", r, r);
  }
  const bool fails = std::find(failing.begin(), failing.end(), comm.rank()) != failing.end();
  try {
    AgreeOnOutcome(comm, [&] {
      if (!fails) return;
      if (comm.rank() % 2 == 0) Fail(ErrorKind::kIo, "boom {}", comm.rank());
      throw std::runtime_error(fmt::format("boom {}", comm.rank()));
    });
    EXPECT_TRUE(failing.empty()) << "rank " << comm.rank() << " saw no failure";
  } catch (const CheckpointError& e) {
    ASSERT_FALSE(failing.empty()) << e.what();
    EXPECT_EQ(e.what(), expected_message) << "rank " << comm.rank();
    EXPECT_EQ(e.kind(), failing[0] % 2 == 0 ? ErrorKind::kIo : ErrorKind::kInvalidArgument);
  }
}

}  // namespace distckpt

#endif  // DISTCKPT_COMM_TESTING_H_
