// The contents of torch.save archives (torch_zip.h): a tensor (data.pkl
// rebuilds it from a storage record data/<key>) or any picklable value.
//
// Tensors: data.pkl is _rebuild_tensor_v2(storage, storage_offset, size,
// stride, requires_grad, hooks) with the storage a persistent id
// ("storage", torch.<Type>Storage, key, location, numel), or
// _rebuild_tensor_v3(..., dtype) with an UntypedStorage counted in bytes
// (float8). The reader honours size, stride and storage offset; the writer
// emits contiguous tensors (v2, or v3 for float8) exactly as
// fixtures/dcp/tools/dcp_rawwrite.py: records data.pkl, byteorder, data/0, version.
//
// Values (BYTE_IO items, ShardedObjects, common.pt) convert to JSON:
// None/bool/int/float/str as themselves, list/tuple/set as arrays, dict /
// OrderedDict as objects (int
// keys become decimal strings, tuple keys their Python repr "(0, 1)"), torch.Size as an array, a
// global (dtype, enum member) as "module.name", bytes as {"__bytes__": "<hex>"}, a tensor as
// {"__tensor__": {"dtype", "shape", "data": [row-major values]}}, and any other allowed object as
// {"__object__": "module.name", "args": [...], "state": ...} (argparse.Namespace(a=1):
// {"__object__": "argparse.Namespace", "args": [], "state": {"a": 1}}). JSON converts back
// to Python values (PickleWriter::Json): objects of allowed classes and bytes are rebuilt;
// tuples become lists, globals strings.
//
// Errors: CheckpointError(kCorruption) naming the archive's source;
// dtypes distckpt does not hold and big-endian archives are kUnsupported.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_TORCH_SAVE_H_
#define DISTCKPT_FORMAT_DCP_TORCH_SAVE_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/box.h"
#include "core/dtype.h"
#include "format/dcp/pickler.h"
#include "format/dcp/py_value.h"
#include "format/dcp/torch_zip.h"

namespace distckpt {

// The ObjectRecord encoding (format.h) of DCP's object items: a torch.save archive.
inline constexpr char kTorchSaveEncoding[] = "torch.save";

// "float32", ... (torch.<name>).
std::string_view TorchDTypeName(DType dtype);

struct TorchTensor {
  DType dtype = DType::kF32;
  std::string storage_key;  // record "data/<key>"
  uint64_t storage_bytes = 0;
  int64_t storage_offset = 0;  // elements
  Shape size;
  Shape stride;  // elements

  int64_t numel() const { return Volume(size); }
  // True if the elements are the row-major bytes starting at storage_offset.
  bool IsContiguous() const;
};

// The tensor a rebuild call describes; nullopt if `v` is not a rebuild call.
// Checks that every element lies inside the storage.
std::optional<TorchTensor> AsTorchTensor(const PyValue& v, const std::string& source);
// The tensor at the root of the archive's data.pkl (kCorruption if none).
TorchTensor ReadTensorRecord(const ZipReader& zip);
// Copies `t`'s elements, in row-major order, out of its storage bytes.
void GatherRowMajor(const TorchTensor& t, std::span<const std::byte> storage, std::byte* dst);

// Emits a contiguous tensor of `shape` (`bytes` bytes) whose storage is the
// record data/<storage_key> (TensorPickle's form), inside a larger pickle.
void EmitTorchTensor(PickleWriter& w, DType dtype, const Shape& shape, uint64_t bytes,
                     std::string_view storage_key);
// The data.pkl of torch.save of a contiguous tensor of `shape` and `dtype`
// (its storage: `bytes` bytes, key "0").
std::string TensorPickle(DType dtype, const Shape& shape, uint64_t bytes);
// torch.save of a contiguous tensor of `shape` whose row-major bytes are
// `data`, its data.pkl `pickle` (TensorPickle: callers saving many tensors
// of one shape make it once). With `stream`, the storage record is
// ZipWriter::AddStreamedRecord of `data` through it (it writes the bytes and
// returns their CRC32). Returns the offset of the storage record's first
// data byte in the archive.
uint64_t WriteTensorRecords(
    ZipWriter& zip, std::string_view pickle, std::span<const std::byte> data,
    const std::function<uint32_t(const ZipWriter::Sink&)>& stream = nullptr);
inline uint64_t WriteTensorRecords(ZipWriter& zip, DType dtype, const Shape& shape,
                                   std::span<const std::byte> data) {
  return WriteTensorRecords(zip, TensorPickle(dtype, shape, data.size()), data);
}
// torch.save(value) of a JSON value.
std::string TorchSaveJson(const nlohmann::json& value);
// One unpickled value of `zip`'s data.pkl (its tensors read from `zip`), as JSON.
nlohmann::json PyToJson(const ZipReader& zip, const PyValue& value, size_t max_depth = 256);
// torch.load of any archive, as JSON (see above). The JSON is bounded (about
// 2 Mi values; shared pickle references expand, a tensor counts its
// elements): a larger expansion is CheckpointError(kCorruption).
nlohmann::json TorchLoadJson(const ZipReader& zip, size_t max_depth = 256);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_TORCH_SAVE_H_
