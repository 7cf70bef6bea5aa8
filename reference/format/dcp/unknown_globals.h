// What the safe unpickler (unpickler.h) does with a global that is neither on
// the allow-list nor forbidden (allow_list.h): a class of a newer Megatron,
// of a user's own code, of a library distckpt has not met.
//
// distckpt never executes a pickle, so such a class can be carried as inert
// data: its global name, its call arguments and its BUILD state (a kObject
// whose callable has PyValue::unknown set). Readers show it, `diff` compares
// it structurally, and a save of the same object-record encoding writes the
// record back byte for byte. Every class carried is noted (NoteUnknownGlobal)
// so a command can warn, naming the file, the class and where it sits.
// Under kRefuse (the CLI's --strict-globals; Megatron's weights_only load)
// an unknown global is CheckpointError(kUnsupported) instead.
//
// The policy and the notes are process-wide, as torch's own
// add_safe_globals is.
//
// Thread-safety: every function may be called from any thread.
#ifndef DISTCKPT_FORMAT_DCP_UNKNOWN_GLOBALS_H_
#define DISTCKPT_FORMAT_DCP_UNKNOWN_GLOBALS_H_

#include <string>
#include <vector>

namespace distckpt {

enum class UnknownGlobalPolicy {
  kCarry,   // the default: carried as opaque data, noted
  kRefuse,  // refused, as torch.load(weights_only=True) refuses it
};

void SetUnknownGlobalPolicy(UnknownGlobalPolicy policy);
UnknownGlobalPolicy GetUnknownGlobalPolicy();

struct UnknownGlobalNote {
  std::string source;  // the pickle: "<file>: data.pkl", "<file>: common_state/shard_0_1"
  std::string global;  // "module.name"
  std::string path;    // where in the value it sits ("args.exit_signal"), "" if not known
};

// Records that `global` was carried; one note per (source, global), the
// first path given kept; at most 256 notes are kept until taken.
void NoteUnknownGlobal(const std::string& source, const std::string& global,
                       const std::string& path = "");
// The notes so far, in the order first noted; clears them.
std::vector<UnknownGlobalNote> TakeUnknownGlobalNotes();
// "warning: <source>: unknown class '<global>' at '<path>' carried as opaque
// data (not on distckpt's allow-list; nothing was executed; --strict-globals
// refuses it)".
std::string DescribeUnknownGlobal(const UnknownGlobalNote& note);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_UNKNOWN_GLOBALS_H_
