#include "format/dcp/pickler.h"

#include <cstring>

namespace distckpt {

PickleWriter::PickleWriter() { out_ = "\x80\x02"; }

void PickleWriter::LE(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((value >> (8 * i)) & 0xff);
}

void PickleWriter::None() { Op('N'); }

void PickleWriter::Bool(bool value) { Op(value ? '\x88' : '\x89'); }

void PickleWriter::Int(int64_t value) {
  if (value >= 0 && value < 256) {
    Op('K');
    LE(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 65536) {
    Op('M');
    LE(static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    Op('J');
    LE(static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
  } else {
    // LONG1, (bit_length + 8) // 8 bytes of two's complement, as dcp_rawwrite.py.
    uint64_t magnitude =
        value < 0 ? ~static_cast<uint64_t>(value) + 1 : static_cast<uint64_t>(value);
    int bits = 64 - __builtin_clzll(magnitude);
    int n = (bits + 8) / 8;
    Op('\x8a');
    out_ += static_cast<char>(n);
    LE(static_cast<uint64_t>(value), n > 8 ? 8 : n);
    if (n > 8) out_ += value < 0 ? '\xff' : '\0';
  }
}

void PickleWriter::UInt(uint64_t value) {
  if (value <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(value));
  Op('\x8a');
  out_ += '\x09';
  LE(value, 8);
  out_ += '\0';
}

void PickleWriter::Float(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  Op('G');
  for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
}

void PickleWriter::Str(std::string_view value) {
  Op('X');
  LE(value.size(), 4);
  out_ += value;
}

void PickleWriter::Global(std::string_view module, std::string_view name) {
  Op('c');
  out_ += module;
  out_ += '\n';
  out_ += name;
  out_ += '\n';
}

void PickleWriter::Tuple(size_t n, const Emit& items) {
  if (n == 0) return Op(')');
  if (n > 3) Op('(');
  items();
  if (n > 3) return Op('t');
  Op(static_cast<char>(0x85 + n - 1));
}

void PickleWriter::TupleOfInts(const Shape& values) {
  Tuple(values.size(), [&] {
    for (int64_t v : values) Int(v);
  });
}

void PickleWriter::Dict(bool empty, const Emit& entries) {
  Op('}');
  if (empty) return;
  Op('(');
  entries();
  Op('u');
}

void PickleWriter::List(bool empty, const Emit& items) {
  Op(']');
  if (empty) return;
  Op('(');
  items();
  Op('e');
}

void PickleWriter::Reduce(const Emit& callable, size_t n, const Emit& args) {
  callable();
  Tuple(n, args);
  Op('R');
}

void PickleWriter::Object(std::string_view module, std::string_view name, const Emit& state) {
  Global(module, name);
  Op(')');
  Op('\x81');
  state();
  Op('b');
}

void PickleWriter::TorchSize(const Shape& dims) {
  Reduce([&] { Global("torch", "Size"); }, 1, [&] { TupleOfInts(dims); });
}

void PickleWriter::BinPersId() { Op('Q'); }

void PickleWriter::Json(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Bool(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Int(value.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return UInt(value.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return Float(value.get<double>());
    case nlohmann::json::value_t::string:
      return Str(value.get_ref<const std::string&>());
    case nlohmann::json::value_t::array:
      return List(value.empty(), [&] {
        for (const nlohmann::json& item : value) Json(item);
      });
    case nlohmann::json::value_t::object:
      return Dict(value.empty(), [&] {
        for (auto it = value.begin(); it != value.end(); ++it) {
          Str(it.key());
          Json(it.value());
        }
      });
    default:  // binary, discarded: not produced by distckpt's common state
      return None();
  }
}

std::string PickleWriter::Finish() {
  Op('.');
  return std::move(out_);
}

}  // namespace distckpt
