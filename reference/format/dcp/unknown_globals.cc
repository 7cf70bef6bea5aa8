#include "format/dcp/unknown_globals.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

namespace distckpt {
namespace {

std::atomic<UnknownGlobalPolicy> policy{UnknownGlobalPolicy::kCarry};
constexpr size_t kMaxNotes = 256;

struct Notes {
  std::mutex mu;
  std::vector<UnknownGlobalNote> notes;
};

Notes& TheNotes() {
  static Notes* notes = new Notes;  // never destroyed: noted from any thread until exit
  return *notes;
}

}  // namespace

void SetUnknownGlobalPolicy(UnknownGlobalPolicy p) { policy.store(p); }

UnknownGlobalPolicy GetUnknownGlobalPolicy() { return policy.load(); }

void NoteUnknownGlobal(const std::string& source, const std::string& global,
                       const std::string& path) {
  Notes& n = TheNotes();
  std::lock_guard lock(n.mu);
  for (UnknownGlobalNote& note : n.notes) {
    if (note.source == source && note.global == global) {
      if (note.path.empty()) note.path = path;
      return;
    }
  }
  // Bounded: a hostile or fuzzed stream can name any number of classes.
  if (n.notes.size() < kMaxNotes) n.notes.push_back({source, global, path});
}

std::vector<UnknownGlobalNote> TakeUnknownGlobalNotes() {
  Notes& n = TheNotes();
  std::lock_guard lock(n.mu);
  std::vector<UnknownGlobalNote> out;
  out.swap(n.notes);
  return out;
}

std::string DescribeUnknownGlobal(const UnknownGlobalNote& note) {
  return fmt::format(
      "warning: {}: unknown class '{}'{} carried as opaque data (not on distckpt's allow-list; "
      "nothing was executed; --strict-globals refuses it)",
      note.source, note.global, note.path.empty() ? "" : fmt::format(" at '{}'", note.path));
}

}  // namespace distckpt
