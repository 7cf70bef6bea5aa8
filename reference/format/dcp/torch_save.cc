#include "format/dcp/torch_save.h"

#include <cstring>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/printable.h"
#include "format/dcp/pickler.h"
#include "format/dcp/unknown_globals.h"
#include "format/dcp/unpickler.h"

namespace distckpt {
namespace {

struct TorchDType {
  DType dtype;
  std::string_view name;     // torch.<name>
  std::string_view storage;  // legacy typed storage class; empty: only UntypedStorage (v3)
};

constexpr TorchDType kTorchDTypes[] = {
    {DType::kF64, "float64", "DoubleStorage"}, {DType::kF32, "float32", "FloatStorage"},
    {DType::kF16, "float16", "HalfStorage"},   {DType::kBF16, "bfloat16", "BFloat16Storage"},
    {DType::kF8E4M3FN, "float8_e4m3fn", ""},   {DType::kF8E5M2, "float8_e5m2", ""},
    {DType::kI8, "int8", "CharStorage"},       {DType::kI16, "int16", "ShortStorage"},
    {DType::kI32, "int32", "IntStorage"},      {DType::kI64, "int64", "LongStorage"},
    {DType::kU8, "uint8", "ByteStorage"},      {DType::kBool, "bool", "BoolStorage"},
};

const TorchDType& Info(DType dtype) {
  for (const TorchDType& t : kTorchDTypes) {
    if (t.dtype == dtype) return t;
  }
  Fail(ErrorKind::kUnsupported, "dtype {} has no torch equivalent", DTypeName(dtype));
}

// The dtype of torch.<name> (a dtype or a typed storage class).
DType FromTorchGlobal(const PyValue& g, bool storage, const std::string& source) {
  if (g.kind == PyKind::kGlobal && g.text == "torch") {
    for (const TorchDType& t : kTorchDTypes) {
      if ((storage ? t.storage : t.name) == g.name && !g.name.empty()) return t.dtype;
    }
  }
  Fail(ErrorKind::kUnsupported, "{}: tensor of {} {}: not a dtype distckpt holds", source,
       storage ? "storage class" : "dtype", g.GlobalName());
}

Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = acc;
    acc *= shape[d];
  }
  return strides;
}

void CheckByteOrder(const ZipReader& zip) {
  const ZipReader::Entry* e = zip.Find("byteorder");
  if (!e) return;  // torch 1.13 never writes it: native (little) order
  std::string order = zip.ReadRecord(*e);
  if (order == "little") return;
  if (order == "big") {
    Fail(ErrorKind::kUnsupported, "{}: big-endian torch.save archive", zip.source());
  }
  Fail(ErrorKind::kCorruption, "{}: byteorder record is '{}'", zip.source(), order);
}

std::string Hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

// PyValue -> JSON (torch_save.h "Values").
class Jsonizer {
 public:
  Jsonizer(const ZipReader& zip, size_t max_depth) : zip_(zip), max_depth_(max_depth) {}

  nlohmann::json Convert(const PyValue& v, size_t depth) {
    if (depth > max_depth_) {
      Fail(ErrorKind::kCorruption, "{}: value nested deeper than {}", zip_.source(), max_depth_);
    }
    Spend(1 + (v.text.size() + 1) / kBytesPerValue);
    switch (v.kind) {
      case PyKind::kNone:
        return nullptr;
      case PyKind::kBool:
        return v.boolean;
      case PyKind::kInt:
        return v.integer;
      case PyKind::kUInt:
        return v.uinteger;
      case PyKind::kBigInt:
        return {{"__bigint_le__", Hex(v.text)}};
      case PyKind::kFloat:
        return v.real;
      case PyKind::kStr:
        return Text(v.text);
      case PyKind::kBytes:
        return {{"__bytes__", Hex(v.text)}};
      case PyKind::kList:
      case PyKind::kTuple:
      case PyKind::kSet:
        return Array(v.items, depth);
      case PyKind::kDict:
        return Object(v, depth);
      case PyKind::kGlobal:
        if (v.unknown) NoteUnknownGlobal(zip_.source() + ": data.pkl", v.GlobalName(), Path());
        return v.GlobalName();
      case PyKind::kPersistent:
        return {{"__persistent__", Convert(*v.items[0], depth + 1)}};
      case PyKind::kObject:
        break;
    }
    if (std::optional<TorchTensor> t = AsTorchTensor(v, zip_.source())) return Tensor(*t);
    if (v.IsInstance("torch", "Size")) return PyToShape(v, zip_.source());
    // Every other object keeps its class (argparse.Namespace included: Megatron's
    // check_checkpoint_args reads `args` by attribute), so a save writes it back;
    // an unknown class (unknown_globals.h) too, noted with where it sits.
    if (v.callable->unknown)
      NoteUnknownGlobal(zip_.source() + ": data.pkl", v.GlobalName(), Path());
    nlohmann::json out = {{"__object__", v.GlobalName()}, {"args", Args(*v.args, depth)}};
    if (v.state) out["state"] = Convert(*v.state, depth + 1);
    return out;
  }

 private:
  nlohmann::json Array(const std::vector<const PyValue*>& items, size_t depth) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < items.size(); ++i) {
      path_.push_back(std::to_string(i));
      out.push_back(Convert(*items[i], depth + 1));
      path_.pop_back();
    }
    return out;
  }

  nlohmann::json Object(const PyValue& dict, size_t depth) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : dict.entries) {
      std::string k = Key(*key);
      path_.push_back(k);
      out[k] = Convert(*value, depth + 1);
      path_.pop_back();
    }
    return out;
  }

  // Where the value being converted sits: "args.exit_signal" ("" at the root;
  // an object's attributes as its BUILD state's keys).
  std::string Path() const {
    std::string out;
    for (const std::string& part : path_) {
      if (!out.empty()) out += '.';
      out += part;
    }
    return out;
  }

  // A Python str as JSON text, which must be UTF-8 (a pickle may hold lone
  // surrogates, or damaged bytes): refused naming the file, not thrown by a
  // later dump naming nothing.
  const std::string& Text(const std::string& text) const {
    if (!IsValidUtf8(text)) {
      Fail(ErrorKind::kCorruption, "{}: a string is not valid UTF-8 ('{}')", zip_.source(),
           Printable(text));
    }
    return text;
  }

  std::string Key(const PyValue& k) {
    switch (k.kind) {
      case PyKind::kStr:
        return Text(k.text);
      case PyKind::kInt:
        return std::to_string(k.integer);
      case PyKind::kBool:
        return k.boolean ? "True" : "False";
      case PyKind::kNone:
        return "None";
      case PyKind::kFloat:
        return fmt::format("{}", k.real);
      case PyKind::kGlobal:
        return k.GlobalName();
      case PyKind::kTuple: {
        // Python's repr of a tuple of keys: "(0, 1)", "(torch.bfloat16,
        // torch.float32)", "(3,)" (Megatron's distributed optimizer keys
        // per_bucket_numel by such tuples).
        std::vector<std::string> parts;
        for (const PyValue* item : k.items) {
          parts.push_back(item->kind == PyKind::kStr ? "'" + item->text + "'" : Key(*item));
        }
        return "(" + fmt::format("{}", fmt::join(parts, ", ")) + (parts.size() == 1 ? ",)" : ")");
      }
      default:
        Fail(ErrorKind::kUnsupported, "{}: dict key of type {} cannot be a JSON key", zip_.source(),
             PyKindName(k.kind));
    }
  }

  nlohmann::json Tensor(const TorchTensor& t) {
    std::string storage = zip_.ReadRecord(zip_.Get("data/" + t.storage_key));
    if (storage.size() < t.storage_bytes) {
      Fail(ErrorKind::kCorruption, "{}: storage record data/{} has {} bytes, the tensor needs {}",
           zip_.source(), t.storage_key, storage.size(), t.storage_bytes);
    }
    Spend(static_cast<uint64_t>(t.numel()));
    std::vector<std::byte> elems(static_cast<size_t>(t.numel()) * DTypeSize(t.dtype));
    GatherRowMajor(t, std::as_bytes(std::span(storage.data(), storage.size())), elems.data());
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < static_cast<size_t>(t.numel()); ++i) {
      if (t.dtype == DType::kI64) {
        int64_t x;
        std::memcpy(&x, elems.data() + i * 8, 8);
        data.push_back(x);
      } else if (IsFloatingPoint(t.dtype)) {
        data.push_back(LoadAsDouble(elems.data(), t.dtype, i));
      } else {
        data.push_back(static_cast<int64_t>(LoadAsDouble(elems.data(), t.dtype, i)));
      }
    }
    return {
        {"__tensor__", {{"dtype", TorchDTypeName(t.dtype)}, {"shape", t.size}, {"data", data}}}};
  }

  // A pickle shares values by reference (the memo): 600 bytes nesting one
  // list 10 times per level over 8 levels is 10^8 values once converted to
  // JSON, which has no sharing. The conversion is bounded instead: at most
  // kMaxJsonValues values, a string counting one per kBytesPerValue bytes
  // and a tensor one per element.
  static constexpr uint64_t kMaxJsonValues = uint64_t{1} << 21;
  static constexpr uint64_t kBytesPerValue = 64;

  void Spend(uint64_t values) {
    spent_ += values;
    if (spent_ > kMaxJsonValues) {
      Fail(ErrorKind::kCorruption,
           "{}: data.pkl expands to more than {} values (shared references repeat a value many "
           "times); refusing to load it",
           zip_.source(), kMaxJsonValues);
    }
  }

  // An object's call arguments: their place in the path is the object's own.
  nlohmann::json Args(const PyValue& args, size_t depth) {
    nlohmann::json out = nlohmann::json::array();
    for (const PyValue* item : args.items) out.push_back(Convert(*item, depth + 2));
    return args.kind == PyKind::kTuple || args.kind == PyKind::kList ? out
                                                                     : Convert(args, depth + 1);
  }

  const ZipReader& zip_;
  size_t max_depth_;
  uint64_t spent_ = 0;
  std::vector<std::string> path_;
};

}  // namespace

std::string_view TorchDTypeName(DType dtype) { return Info(dtype).name; }

bool TorchTensor::IsContiguous() const {
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != expected) return false;
    expected *= size[d];
  }
  return true;
}

std::optional<TorchTensor> AsTorchTensor(const PyValue& v, const std::string& source) {
  const bool v3 = v.IsInstance("torch._utils", "_rebuild_tensor_v3");
  if (!v3 && !v.IsInstance("torch._utils", "_rebuild_tensor_v2")) return std::nullopt;
  const std::string what = source + ": tensor rebuild arguments";
  const std::vector<const PyValue*>& args = v.args->items;
  if (args.size() < (v3 ? 7u : 6u) || args[0]->kind != PyKind::kPersistent) {
    Fail(ErrorKind::kCorruption, "{}: expected (storage, offset, size, stride, ...)", what);
  }
  const std::vector<const PyValue*>& id = PyToSequence(*args[0]->items[0], what);
  if (id.size() != 5 || id[0]->kind != PyKind::kStr || id[0]->text != "storage") {
    Fail(ErrorKind::kCorruption,
         "{}: storage persistent id is not ('storage', class, key, "
         "location, numel)",
         what);
  }
  TorchTensor t;
  // An UntypedStorage counts bytes; a typed storage class counts its own elements.
  const bool untyped = id[1]->Is("torch.storage", "UntypedStorage");
  const uint64_t element = untyped ? 1 : DTypeSize(FromTorchGlobal(*id[1], true, source));
  t.dtype = v3 ? FromTorchGlobal(*args[6], false, source) : FromTorchGlobal(*id[1], true, source);
  t.storage_key = PyToStr(*id[2], what);
  const int64_t numel = PyToInt(*id[4], what);
  t.storage_offset = PyToInt(*args[1], what);
  t.size = PyToShape(*args[2], what);
  t.stride = PyToShape(*args[3], what);
  if (numel < 0 || numel > (int64_t{1} << 56) || t.storage_offset < 0 ||
      t.size.size() != t.stride.size() || t.size.size() > 64) {
    Fail(ErrorKind::kCorruption, "{}: storage of {} elements, offset {}, size {} stride {}", what,
         numel, t.storage_offset, ShapeToString(t.size), ShapeToString(t.stride));
  }
  t.storage_bytes = static_cast<uint64_t>(numel) * element;
  // Every element must lie inside the storage (all arithmetic in 128 bits).
  unsigned __int128 count = 1, last = static_cast<unsigned __int128>(t.storage_offset);
  for (size_t d = 0; d < t.size.size(); ++d) {
    count *= static_cast<unsigned __int128>(t.size[d]);
    if (t.size[d] > 0) last += static_cast<unsigned __int128>(t.size[d] - 1) * t.stride[d];
    if (count > (static_cast<unsigned __int128>(1) << 62)) {
      Fail(ErrorKind::kCorruption, "{}: size {} is too large", what, ShapeToString(t.size));
    }
  }
  if (count > 0 && (last + 1) * DTypeSize(t.dtype) > t.storage_bytes) {
    Fail(ErrorKind::kCorruption,
         "{}: size {} stride {} offset {} reaches past the storage's {} "
         "bytes",
         what, ShapeToString(t.size), ShapeToString(t.stride), t.storage_offset, t.storage_bytes);
  }
  return t;
}

TorchTensor ReadTensorRecord(const ZipReader& zip) {
  CheckByteOrder(zip);
  const std::string source = zip.source() + ": data.pkl";
  PyTree tree = Unpickle(zip.ReadRecord(zip.Get("data.pkl")), source);
  std::optional<TorchTensor> t = AsTorchTensor(*tree.root(), source);
  if (!t) {
    Fail(ErrorKind::kCorruption, "{}: holds a {} {}, not a tensor", source,
         PyKindName(tree.root()->kind), tree.root()->GlobalName());
  }
  return *t;
}

void GatherRowMajor(const TorchTensor& t, std::span<const std::byte> storage, std::byte* dst) {
  const size_t es = DTypeSize(t.dtype);
  const int64_t n = t.numel();
  if (n == 0) return;
  if (t.IsContiguous()) {
    std::memcpy(dst, storage.data() + t.storage_offset * es, static_cast<size_t>(n) * es);
    return;
  }
  Shape index(t.size.size(), 0);
  int64_t src = t.storage_offset;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * es, storage.data() + src * es, es);
    for (size_t d = t.size.size(); d-- > 0;) {  // odometer step in row-major order
      src += t.stride[d];
      if (++index[d] < t.size[d]) break;
      src -= t.stride[d] * t.size[d];
      index[d] = 0;
    }
  }
}

void EmitTorchTensor(PickleWriter& w, DType dtype, const Shape& shape, uint64_t bytes,
                     std::string_view storage_key) {
  const TorchDType& info = Info(dtype);
  const bool v3 = info.storage.empty();  // float8: UntypedStorage counted in bytes
  w.Reduce([&] { w.Global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2"); },
           v3 ? 7 : 6,
           [&] {
             w.Tuple(5, [&] {
               w.Str("storage");
               v3 ? w.Global("torch.storage", "UntypedStorage") : w.Global("torch", info.storage);
               w.Str(storage_key);
               w.Str("cpu");
               w.Int(v3 ? static_cast<int64_t>(bytes) : Volume(shape));
             });
             w.BinPersId();
             w.Int(0);
             w.TupleOfInts(shape);
             w.TupleOfInts(RowMajorStrides(shape));
             w.Bool(false);
             w.Reduce([&] { w.Global("collections", "OrderedDict"); }, 0, [] {});
             if (v3) w.Global("torch", info.name);
           });
}

std::string TensorPickle(DType dtype, const Shape& shape, uint64_t bytes) {
  PickleWriter w;
  EmitTorchTensor(w, dtype, shape, bytes, "0");
  return w.Finish();
}

uint64_t WriteTensorRecords(ZipWriter& zip, std::string_view pickle,
                            std::span<const std::byte> data,
                            const std::function<uint32_t(const ZipWriter::Sink&)>& stream) {
  zip.AddRecord("data.pkl", pickle);
  zip.AddRecord("byteorder", "little");
  const uint64_t data_offset =
      stream ? zip.AddStreamedRecord("data/0", data.size(), stream) : zip.AddRecord("data/0", data);
  zip.AddRecord("version", "3\n");
  return data_offset;
}

std::string TorchSaveJson(const nlohmann::json& value) {
  PickleWriter w;
  w.Json(value);
  std::string pickle = w.Finish();
  return ZipToString([&](ZipWriter& zip) {
    zip.AddRecord("data.pkl", pickle);
    zip.AddRecord("byteorder", "little");
    zip.AddRecord("version", "3\n");
  });
}

nlohmann::json PyToJson(const ZipReader& zip, const PyValue& value, size_t max_depth) {
  return Jsonizer(zip, max_depth).Convert(value, 0);
}

nlohmann::json TorchLoadJson(const ZipReader& zip, size_t max_depth) {
  CheckByteOrder(zip);
  PyTree tree = Unpickle(zip.ReadRecord(zip.Get("data.pkl")), zip.source() + ": data.pkl");
  return Jsonizer(zip, max_depth).Convert(*tree.root(), 0);
}

}  // namespace distckpt
