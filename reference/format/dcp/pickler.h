// PickleWriter: emits the protocol-2 pickle opcodes distckpt writes (the
// same encoding as fixtures/dcp/tools/dcp_rawwrite.py, so the output is byte-stable
// and loads in torch 1.13 and 2.x): BININT1/BININT2/BININT/LONG1 integers,
// BINFLOAT, BINUNICODE strings, GLOBAL, tuples (EMPTY_TUPLE, TUPLE1-3,
// MARK..TUPLE), dicts and lists (EMPTY_* then MARK..SETITEMS / APPENDS when
// non-empty), REDUCE, NEWOBJ + BUILD for dataclasses, BINPERSID. No memo.
//
// Composite values are emitted by callbacks so nothing is buffered twice:
//   w.Tuple(2, [&] { w.Int(3); w.Int(4); });
//
// Thread-safety: one writer per thread.
#ifndef DISTCKPT_FORMAT_DCP_PICKLER_H_
#define DISTCKPT_FORMAT_DCP_PICKLER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/box.h"

namespace distckpt {

class PickleWriter {
 public:
  // A callback emitting a composite's items: a reference to a callable that
  // outlives the call it is passed to (no copy, no allocation, as C++26's
  // std::function_ref; nested values are emitted by nested lambdas).
  class Emit {
   public:
    template <typename F>
      requires(!std::is_same_v<std::remove_cvref_t<F>, Emit> && std::is_invocable_v<F&>)
    Emit(F&& f)  // NOLINT: implicit, as a lambda is passed
        : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* c) { (*static_cast<std::remove_reference_t<F>*>(c))(); }) {}
    void operator()() const { call_(callable_); }

   private:
    void* callable_;
    void (*call_)(void*);
  };

  PickleWriter();  // starts with PROTO 2

  void None();
  void Bool(bool value);
  void Int(int64_t value);
  void UInt(uint64_t value);
  void Float(double value);
  void Str(std::string_view value);
  void Global(std::string_view module, std::string_view name);
  // `n` items emitted by `items`: EMPTY_TUPLE, items + TUPLE1..3, or MARK items TUPLE.
  void Tuple(size_t n, const Emit& items);
  void TupleOfInts(const Shape& values);
  // EMPTY_DICT, then MARK <key value ...> SETITEMS unless `empty`.
  void Dict(bool empty, const Emit& entries);
  void List(bool empty, const Emit& items);
  // callable, arguments tuple of `n` items, REDUCE.
  void Reduce(const Emit& callable, size_t n, const Emit& args);
  // A dataclass: GLOBAL cls, EMPTY_TUPLE, NEWOBJ, `state` (a dict or tuple), BUILD.
  void Object(std::string_view module, std::string_view name, const Emit& state);
  // torch.Size((d0, d1, ...)).
  void TorchSize(const Shape& dims);
  void BinPersId();
  // bytes, as protocol 2 writes them: _codecs.encode(<latin-1 str>, "latin1").
  void Bytes(std::string_view bytes);
  // Any JSON value as the Python value json.loads would give: null None,
  // bool, int, float, str, list, dict (string keys); and torch_save.h's forms
  // back as Python values: {"__bytes__": hex} as bytes, {"__object__":
  // "module.name", "args": [...], "state": S} of an allowed class (allow_list.h)
  // as module.name(*args) then BUILD with S (state optional). Other dicts stay dicts.
  void Json(const nlohmann::json& value);

  // Room for `bytes` more without reallocating (a large stream's estimate).
  void Reserve(size_t bytes) { out_.reserve(out_.size() + bytes); }
  // Appends STOP and returns the stream.
  std::string Finish();

 private:
  void Op(char op) { out_ += op; }
  void LE(uint64_t value, int bytes);

  std::string out_;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_PICKLER_H_
