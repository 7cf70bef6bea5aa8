#include "format/dcp/py_value.h"

#include "core/error.h"

namespace distckpt {
namespace {

std::string Describe(const PyValue& v) {
  if (v.kind == PyKind::kObject || v.kind == PyKind::kGlobal) {
    return fmt::format("{} {}", PyKindName(v.kind), v.GlobalName());
  }
  return std::string(PyKindName(v.kind));
}

[[noreturn]] void FailKind(const PyValue& v, std::string_view expected, std::string_view what) {
  Fail(ErrorKind::kCorruption, "{}: expected {}, found {}", what, expected, Describe(v));
}

}  // namespace

std::string_view PyKindName(PyKind kind) {
  switch (kind) {
    case PyKind::kNone:
      return "None";
    case PyKind::kBool:
      return "bool";
    case PyKind::kInt:
    case PyKind::kUInt:
    case PyKind::kBigInt:
      return "int";
    case PyKind::kFloat:
      return "float";
    case PyKind::kStr:
      return "str";
    case PyKind::kBytes:
      return "bytes";
    case PyKind::kList:
      return "list";
    case PyKind::kTuple:
      return "tuple";
    case PyKind::kDict:
      return "dict";
    case PyKind::kSet:
      return "set";
    case PyKind::kGlobal:
      return "global";
    case PyKind::kObject:
      return "object of";
    case PyKind::kPersistent:
      return "persistent id";
  }
  return "?";
}

bool PyValue::Is(std::string_view module, std::string_view global_name) const {
  return kind == PyKind::kGlobal && text == module && name == global_name;
}

bool PyValue::IsInstance(std::string_view module, std::string_view global_name) const {
  return kind == PyKind::kObject && callable->Is(module, global_name);
}

std::string PyValue::GlobalName() const {
  if (kind == PyKind::kObject) return callable->GlobalName();
  return kind == PyKind::kGlobal ? text + "." + name : std::string();
}

const PyValue* PyValue::Get(std::string_view key) const {
  if (kind != PyKind::kDict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->kind == PyKind::kStr && it->first->text == key) return it->second;
  }
  return nullptr;
}

const PyValue* PyValue::Field(std::string_view field) const {
  return kind == PyKind::kObject && state ? state->Get(field) : nullptr;
}

PyValue* PyTree::New(PyKind kind) {
  PyValue& v = nodes_.emplace_back();
  v.kind = kind;
  return &v;
}

int64_t PyToInt(const PyValue& v, std::string_view what) {
  if (v.kind == PyKind::kInt) return v.integer;
  if (v.kind == PyKind::kBool) return v.boolean ? 1 : 0;
  FailKind(v, "an int (at most 64 bits)", what);
}

const std::string& PyToStr(const PyValue& v, std::string_view what) {
  if (v.kind != PyKind::kStr) FailKind(v, "a str", what);
  return v.text;
}

const std::vector<const PyValue*>& PyToSequence(const PyValue& v, std::string_view what) {
  if (v.kind != PyKind::kTuple && v.kind != PyKind::kList) FailKind(v, "a tuple or list", what);
  return v.items;
}

Shape PyToShape(const PyValue& v, std::string_view what) {
  const PyValue* dims = &v;
  if (v.IsInstance("torch", "Size")) {
    const std::vector<const PyValue*>& args = v.args->items;
    if (args.size() != 1) FailKind(v, "torch.Size with one argument", what);
    dims = args[0];
  }
  Shape shape;
  for (const PyValue* d : PyToSequence(*dims, what)) {
    int64_t n = PyToInt(*d, what);
    if (n < 0) Fail(ErrorKind::kCorruption, "{}: negative dimension {}", what, n);
    shape.push_back(n);
  }
  return shape;
}

const PyValue& PyRequireField(const PyValue& v, std::string_view field, std::string_view what) {
  const PyValue* f = v.Field(field);
  if (!f) {
    Fail(ErrorKind::kCorruption, "{}: {} has no field '{}'", what, Describe(v), field);
  }
  return *f;
}

}  // namespace distckpt
