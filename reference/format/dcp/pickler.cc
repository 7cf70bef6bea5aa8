#include "format/dcp/pickler.h"

#include <cctype>
#include <cstring>
#include <optional>

#include "core/little_endian.h"
#include "format/dcp/allow_list.h"

namespace distckpt {

PickleWriter::PickleWriter() { out_ = "\x80\x02"; }

void PickleWriter::LE(uint64_t value, int bytes) { AppendLittleEndian(out_, value, bytes); }

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

namespace {

// {"__object__": "module.name", "args": [...] (, "state": ...)} naming a
// class that is not forbidden (allow_list.h; an unknown class read as opaque
// data is written back as it was): torch_save.h's form of a pickled object.
bool IsObjectForm(const nlohmann::json& v) {
  if (v.size() != 2 && v.size() != 3) return false;
  auto name = v.find("__object__");
  auto args = v.find("args");
  if (name == v.end() || !name->is_string() || args == v.end() || !args->is_array()) return false;
  if (v.size() == 3 && !v.contains("state")) return false;
  const std::string& n = name->get_ref<const std::string&>();
  const size_t dot = n.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == n.size()) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  }
  return !IsForbiddenGlobal(n.substr(0, dot), n.substr(dot + 1));
}

// {"__bytes__": "<even-length lowercase hex>"} -> the bytes, or nullopt.
std::optional<std::string> BytesForm(const nlohmann::json& v) {
  if (v.size() != 1) return std::nullopt;
  auto hex = v.find("__bytes__");
  if (hex == v.end() || !hex->is_string()) return std::nullopt;
  const std::string& h = hex->get_ref<const std::string&>();
  if (h.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    int value = 0;
    for (char c : {h[i], h[i + 1]}) {
      int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    out += static_cast<char>(value);
  }
  return out;
}

}  // namespace

void PickleWriter::Bytes(std::string_view bytes) {
  // Protocol 2 has no bytes opcode: Python writes _codecs.encode(<latin-1 str>, "latin1").
  std::string latin1;
  for (unsigned char b : bytes) {
    if (b < 0x80) {
      latin1 += static_cast<char>(b);
    } else {
      latin1 += static_cast<char>(0xC0 | (b >> 6));
      latin1 += static_cast<char>(0x80 | (b & 0x3F));
    }
  }
  Reduce([&] { Global("_codecs", "encode"); }, 2,
         [&] {
           Str(latin1);
           Str("latin1");
         });
}

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
      if (IsObjectForm(value)) {
        const std::string& name = value["__object__"].get_ref<const std::string&>();
        const size_t dot = name.rfind('.');
        const nlohmann::json& args = value["args"];
        Reduce([&] { Global(name.substr(0, dot), name.substr(dot + 1)); }, args.size(),
               [&] {
                 for (const nlohmann::json& arg : args) Json(arg);
               });
        if (value.contains("state")) {
          Json(value["state"]);
          Op('b');  // BUILD
        }
        return;
      }
      if (std::optional<std::string> bytes = BytesForm(value)) return Bytes(*bytes);
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
