// PyValue: the typed value tree a safe unpickle (unpickler.h) produces: the
// data of a pickle stream, never live Python objects. Containers and class
// instances refer to their parts by pointer into a PyTree arena, so memo
// references share nodes exactly as in Python (and cycles cannot leak).
//
// A class instance or an allowed call (REDUCE / NEWOBJ) is a kObject: the
// global called, its argument tuple and the state BUILD gave it. Decoders
// (dcp_metadata.h, torch_save.h) read the objects they know by class name.
//
// Accessors that expect a kind throw CheckpointError(kCorruption) naming the
// `what` they were given and the kind found.
//
// Thread-safety: a finished PyTree is immutable and may be read concurrently.
#ifndef DISTCKPT_FORMAT_DCP_PY_VALUE_H_
#define DISTCKPT_FORMAT_DCP_PY_VALUE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/box.h"

namespace distckpt {

enum class PyKind {
  kNone,
  kBool,
  kInt,
  kUInt,
  kBigInt,
  kFloat,
  kStr,
  kBytes,
  kList,
  kTuple,
  kDict,
  kSet,
  kGlobal,
  kObject,
  kPersistent,
};

struct PyValue {
  PyKind kind = PyKind::kNone;
  bool boolean = false;
  int64_t integer = 0;    // kInt
  uint64_t uinteger = 0;  // kUInt: 2^63 <= value < 2^64
  double real = 0;        // kFloat
  // kStr (UTF-8), kBytes, kBigInt (little-endian two's complement bytes),
  // kGlobal (module).
  std::string text;
  std::string name;  // kGlobal
  // kList, kTuple, kSet items; kPersistent: the persistent id.
  std::vector<const PyValue*> items;
  std::vector<std::pair<const PyValue*, const PyValue*>> entries;  // kDict, in insertion order
  const PyValue* callable = nullptr;                               // kObject: the kGlobal called
  const PyValue* args = nullptr;                                   // kObject: a kTuple
  const PyValue* state = nullptr;  // kObject: BUILD state, or nullptr
  uint32_t depth = 1;              // nesting seen while unpickling
  // kGlobal: off the allow-list, carried as inert data (unknown_globals.h).
  bool unknown = false;

  bool Is(std::string_view module, std::string_view global_name) const;
  // For kObject: true if the class / callable is `module.name`.
  bool IsInstance(std::string_view module, std::string_view global_name) const;
  // "module.name" of a kGlobal, or of the callable of a kObject.
  std::string GlobalName() const;
  // kDict lookup of a string key (the last one set wins, as in Python); nullptr if absent.
  const PyValue* Get(std::string_view key) const;
  // A kObject's field: its BUILD state dict entry `field`, nullptr if absent.
  const PyValue* Field(std::string_view field) const;
};

std::string_view PyKindName(PyKind kind);

// Owns every node of one unpickled stream. Movable, not copyable.
class PyTree {
 public:
  PyTree() = default;
  PyTree(PyTree&&) = default;
  PyTree& operator=(PyTree&&) = default;
  PyTree(const PyTree&) = delete;
  PyTree& operator=(const PyTree&) = delete;

  PyValue* New(PyKind kind);
  size_t size() const { return nodes_.size(); }
  const PyValue* root() const { return root_; }
  void set_root(const PyValue* root) { root_ = root; }

 private:
  std::deque<PyValue> nodes_;  // a deque never moves its elements
  const PyValue* root_ = nullptr;
};

// Typed accessors; `what` names the value in errors ("<file>: chunk 2 sizes").
int64_t PyToInt(const PyValue& v, std::string_view what);
const std::string& PyToStr(const PyValue& v, std::string_view what);
// Items of a kTuple or kList.
const std::vector<const PyValue*>& PyToSequence(const PyValue& v, std::string_view what);
// A torch.Size (REDUCE(torch.Size, ((d0, d1, ...),))) or a tuple / list of ints.
Shape PyToShape(const PyValue& v, std::string_view what);
// A required field of a kObject (PyValue::Field); kCorruption when absent.
const PyValue& PyRequireField(const PyValue& v, std::string_view field, std::string_view what);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_PY_VALUE_H_
