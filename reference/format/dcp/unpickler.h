// A safe unpickler for pickle protocols 2-5 (and the binary protocol 1
// opcodes such streams contain). It builds a PyTree (py_value.h) and never
// executes anything: a GLOBAL on the allow-list (allow_list.h) resolves; one
// off it is carried as an unknown global or refused (unknown_globals.h), a
// forbidden one always refused; a call (REDUCE, NEWOBJ) is recorded as data,
// not performed. A few allowed calls are evaluated because they only build data:
// OrderedDict(...) becomes a dict, PosixPath(*parts) a str,
// getattr(cls, "NAME") the global "cls.NAME". BUILD on such an OrderedDict
// (torch's state_dict() carries `_metadata` as an attribute) drops the state.
//
// Bounds (UnpickleLimits): container nesting, memo entries and nodes
// created; every length field is checked against the bytes left, so a
// crafted stream cannot make it allocate more than its own size plus the
// node budget. Violations and malformed streams are CheckpointError
// (kCorruption) "<source>: pickle: <problem> at byte <n>"; opcodes this
// reader does not implement (protocol 0's text opcodes, INST, OBJ, EXT*,
// out-of-band buffers) are kUnsupported.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_UNPICKLER_H_
#define DISTCKPT_FORMAT_DCP_UNPICKLER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "format/dcp/allow_list.h"
#include "format/dcp/py_value.h"
#include "format/dcp/unknown_globals.h"

namespace distckpt {

struct UnpickleLimits {
  size_t max_depth = 256;      // container nesting
  size_t max_memo = 1u << 20;  // memo entries
  // Values created: 8 Mi nodes of 176 bytes, 1.4 GiB at most. A .metadata
  // needs one per 5-10 bytes, so this admits files up to about 40-80 MB.
  size_t max_nodes = 1u << 23;
  // The globals that resolve; nullptr: IsAllowedGlobal (allow_list.h).
  bool (*allow_global)(std::string_view module, std::string_view name) = nullptr;
  // What a global off that list becomes (forbidden ones are always refused);
  // nullopt: the process's GetUnknownGlobalPolicy().
  std::optional<UnknownGlobalPolicy> unknown_globals;
};

// `source` names the stream in errors (a file, "data.pkl of item ...").
PyTree Unpickle(std::string_view bytes, const std::string& source,
                const UnpickleLimits& limits = {});

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_UNPICKLER_H_
