// Backend-independent parts of Communicator: sub-groups, scalar reductions,
// the AgreeOnOutcome verdict exchange and a rank's share of the threads.
#include "comm/communicator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <exception>
#include <optional>

#include "core/error.h"
#include "core/helper_pool.h"

namespace distckpt {
namespace {

// AgreeOnOutcome's status record: empty on success, else one byte holding the
// ErrorKind followed by the message.
std::string EncodeFailure(ErrorKind kind, const char* message) {
  std::string record(1, static_cast<char>(kind));
  record += message;
  return record;
}

}  // namespace

void Communicator::CheckRoot(int root) const {
  if (root < 0 || root >= size()) {
    Fail(ErrorKind::kInvalidArgument, "root rank {} out of range for a communicator of size {}",
         root, size());
  }
}

std::unique_ptr<Communicator> Communicator::Subgroup(const std::vector<int>& ranks) {
  std::vector<bool> listed(size(), false);
  int key = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= size()) {
      Fail(ErrorKind::kInvalidArgument,
           "Subgroup: rank {} out of range for a communicator of size {}", r, size());
    }
    if (listed[r]) Fail(ErrorKind::kInvalidArgument, "Subgroup: rank {} listed twice", r);
    listed[r] = true;
    if (r == rank()) key = static_cast<int>(i);
  }
  // The key is the position in `ranks`, so the sub-group keeps the list's order.
  return Split(key >= 0 ? 0 : -1, key);
}

int64_t Communicator::AllReduceOne(int64_t value, ReduceOp op) {
  AllReduce(std::span<int64_t>(&value, 1), op);
  return value;
}

void AgreeOnOutcome(Communicator& comm, const std::function<void()>& fn) {
  std::string status;
  try {
    fn();
  } catch (const CheckpointError& e) {
    status = EncodeFailure(e.kind(), e.what());
  } catch (const std::exception& e) {
    // Not one of ours (std::bad_alloc, a library's error): keep its message.
    status = EncodeFailure(ErrorKind::kInvalidArgument, e.what());
  } catch (...) {
    status = EncodeFailure(ErrorKind::kInvalidArgument, "unknown exception");
  }
  const std::vector<std::string> statuses = comm.AllGather(status);
  // Ranks failing with the same message are named together:
  // "ranks 0, 1, 2: <message>; rank 5: <other message>".
  std::optional<ErrorKind> kind;
  std::vector<std::pair<std::string, std::vector<size_t>>>
      groups;  // message -> ranks, first-seen order
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].empty()) continue;
    if (!kind) kind = static_cast<ErrorKind>(statuses[r][0]);
    std::string text(std::string_view(statuses[r]).substr(1));
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == text; });
    if (it == groups.end())
      groups.push_back({std::move(text), {r}});
    else
      it->second.push_back(r);
  }
  std::string message;
  for (const auto& [text, ranks] : groups) {
    if (!message.empty()) message += "; ";
    message += fmt::format("{} {}: {}", ranks.size() == 1 ? "rank" : "ranks",
                           fmt::join(ranks, ", "), text);
  }
  if (kind) throw CheckpointError(*kind, message);
}

int ThreadsPerRank(const Communicator& comm) {
  return std::max(1, HardwareThreads() / comm.ranks_on_node());
}

}  // namespace distckpt
