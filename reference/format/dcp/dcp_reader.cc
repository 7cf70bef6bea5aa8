#include "format/dcp/dcp_reader.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "format/dcp/megatron_files.h"
#include "format/format.h"

namespace distckpt {
namespace {

using Describe = std::function<std::string()>;

constexpr uint64_t kSmallItem = 4 << 10;  // read whole
constexpr uint64_t kEdge = 1 << 10;       // head / tail of a larger item

// The bytes of one item larger than kSmallItem: a cached head (local
// headers, data.pkl) and tail (zip directory); other bytes read as asked.
class ItemSource {
 public:
  ItemSource(const RandomAccessFile& file, uint64_t base, uint64_t length, ReadStats& stats)
      : file_(file), base_(base), length_(length), stats_(stats) {}

  void Read(uint64_t offset, std::span<std::byte> dst) {
    if (offset + dst.size() <= kEdge) return Copy(head_, 0, offset, dst);
    if (offset >= length_ - kEdge) return Copy(tail_, length_ - kEdge, offset, dst);
    file_.Read(base_ + offset, dst);
    stats_.bytes_read += dst.size();
  }

 private:
  void Copy(std::vector<std::byte>& cache, uint64_t start, uint64_t offset,
            std::span<std::byte> dst) {
    if (cache.empty()) {
      cache.resize(kEdge);
      file_.Read(base_ + start, cache);
      stats_.bytes_read += kEdge;
    }
    std::memcpy(dst.data(), cache.data() + (offset - start), dst.size());
  }

  const RandomAccessFile& file_;
  const uint64_t base_, length_;
  ReadStats& stats_;
  std::vector<std::byte> head_, tail_;
};

std::string ChunkName(const StoredTensor& tensor, const StoredChunk& chunk) {
  std::string name = fmt::format("key '{}' chunk at global offset {}", tensor.key,
                                 ShapeToString(chunk.box.offset));
  if (chunk.flat) name += fmt::format(" (flat [{}, {}))", chunk.flat->start, chunk.flat->stop);
  return name;
}

// Total bytes of `runs`, checked sorted, disjoint and inside `length`.
uint64_t CheckedRunBytes(std::span<const ReadRun> runs, uint64_t length, const Describe& what) {
  uint64_t covered = 0, end = 0;
  for (const ReadRun& run : runs) {
    if (run.offset_in_chunk < end || run.offset_in_chunk > length ||
        run.length > length - run.offset_in_chunk) {
      Fail(ErrorKind::kInvalidArgument,
           "read runs for {} are unsorted, overlap or exceed its {} "
           "bytes (run at {}, {} bytes)",
           what(), length, run.offset_in_chunk, run.length);
    }
    end = run.offset_in_chunk + run.length;
    covered += run.length;
  }
  return covered;
}

void CheckCrc(uint32_t actual, uint32_t expected, const std::string& file, const Describe& what) {
  if (actual != expected) {
    Fail(ErrorKind::kCorruption,
         "CRC32 mismatch in {} for {}: the zip records {:08x}, the data "
         "hashes to {:08x}",
         file, what(), expected, actual);
  }
}

}  // namespace

DcpReader::DcpReader(Env* env, std::string dir, DcpLayout layout)
    : env_(env),
      dir_(std::move(dir)),
      layout_(std::move(layout)),
      files_(env_, dir_, kDcpMetadataFileName) {
  layout_.metadata.common = ReadCommonState();
  if (auto it = layout_.metadata.common.find("content_metadata");
      it != layout_.metadata.common.end() && it->is_object()) {
    layout_.metadata.content = *it;
  }
  stats_.bytes_read = 0;  // opening is not part of any load's reads
}

ZipReader DcpReader::OpenItem(const std::string& file, uint64_t offset, uint64_t length,
                              const Describe& what, std::shared_ptr<const std::string>* whole) {
  auto item = layout_.items.find({file, offset});
  if (item != layout_.items.end() && !item->second.transforms.empty()) {
    Fail(ErrorKind::kUnsupported,
         "{} in {} was written with stream transforms [{}], which "
         "distckpt cannot decode",
         what(), JoinPath(dir_, file), fmt::join(item->second.transforms, ", "));
  }
  const RandomAccessFile& f = files_.Open(file, offset, length, what);
  // The offset and length come from .metadata, which has no checksum: a
  // damaged one sends the read to other bytes, so the message names both.
  std::string source =
      fmt::format("{} (item at bytes [{}, {}) as {} records, {})", f.path(), offset,
                  offset + length, JoinPath(dir_, kDcpMetadataFileName), what());
  if (length <= kSmallItem) {  // headers and data in one read
    auto bytes = std::make_shared<std::string>(length, '\0');
    f.Read(offset, std::as_writable_bytes(std::span(bytes->data(), bytes->size())));
    stats_.bytes_read += length;
    if (whole) *whole = bytes;
    return ZipReader(
        [bytes](uint64_t at, std::span<std::byte> dst) {
          std::memcpy(dst.data(), bytes->data() + at, dst.size());
        },
        length, std::move(source));
  }
  auto cache = std::make_shared<ItemSource>(f, offset, length, stats_);
  return ZipReader([cache](uint64_t at, std::span<std::byte> dst) { cache->Read(at, dst); }, length,
                   std::move(source));
}

const DcpReader::TensorItem& DcpReader::Item(const StoredTensor& tensor, const StoredChunk& chunk,
                                             const Describe& what) {
  const DcpItemKey key{chunk.file, chunk.offset};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = tensor_items_.find(key); it != tensor_items_.end()) return it->second;
  }
  auto length = layout_.items.find(key);
  if (length == layout_.items.end()) {
    Fail(ErrorKind::kCorruption, "{}: no storage entry in .metadata", what());
  }
  std::shared_ptr<const std::string> whole;
  ZipReader zip = OpenItem(chunk.file, chunk.offset, length->second.length, what, &whole);
  TensorItem item;
  item.tensor = ReadTensorRecord(zip);
  item.bytes = std::move(whole);
  const TorchTensor& t = item.tensor;
  const bool shape_ok = chunk.flat ? t.numel() == chunk.flat->size() : t.size == chunk.box.shape;
  if (t.dtype != tensor.dtype || !shape_ok) {
    Fail(ErrorKind::kCorruption,
         "{}: the item holds a {} tensor of size {}, .metadata expects {} "
         "{}",
         zip.source(), TorchDTypeName(t.dtype), ShapeToString(t.size), TorchDTypeName(tensor.dtype),
         chunk.flat ? fmt::format("with {} elements", chunk.flat->size())
                    : ShapeToString(chunk.box.shape));
  }
  const ZipReader::Entry& record = zip.Get("data/" + t.storage_key);
  if (record.method != 0 || record.size < t.storage_bytes) {
    Fail(ErrorKind::kCorruption,
         "{}: storage record data/{} is {} bytes (method {}), the tensor "
         "needs {} stored bytes",
         zip.source(), t.storage_key, record.size, record.method, t.storage_bytes);
  }
  item.record_offset = chunk.offset + zip.DataOffset(record);
  item.record_size = record.size;
  item.crc = record.crc;
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_items_.emplace(key, std::move(item)).first->second;
}

void DcpReader::ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                          std::span<const ReadRun> runs, VerifyPolicy policy) {
  const Describe what = [&] { return ChunkName(tensor, chunk); };
  const uint64_t covered = CheckedRunBytes(runs, chunk.length, what);
  if (covered == 0 && chunk.length > 0) return;
  const TensorItem& item = Item(tensor, chunk, what);
  const RandomAccessFile& file =
      files_.Open(chunk.file, item.record_offset, item.record_size, what);
  // Bytes [offset, offset + dst.size()) of the storage record: from memory
  // for a small item (counted when it was read), else from the data file.
  auto read_record = [&](uint64_t offset, std::span<std::byte> dst) {
    if (item.bytes) {
      std::memcpy(dst.data(), item.bytes->data() + (item.record_offset - chunk.offset) + offset,
                  dst.size());
    } else {
      file.Read(item.record_offset + offset, dst);
      stats_.bytes_read += dst.size();
    }
  };
  const TorchTensor& t = item.tensor;
  const uint64_t start = static_cast<uint64_t>(t.storage_offset) * DTypeSize(t.dtype);
  // The runs tile the chunk, and the chunk is the whole record: its CRC applies.
  const bool whole =
      covered == chunk.length && t.IsContiguous() && start == 0 && item.record_size == chunk.length;
  const bool verify = policy != VerifyPolicy::kNever;

  // A partial read of a record is verified too (unless kNever): torch's items
  // carry one CRC32 for the whole record and no finer checksum, so the record
  // is read whole (below). Returning unverified bytes let a flipped data byte
  // reach a resharded load as a wrong value (issue 15).
  if (t.IsContiguous() && (whole || policy == VerifyPolicy::kNever)) {
    uint32_t crc = 0;
    for (size_t i = 0; i < runs.size();) {
      size_t j = i;  // merge runs adjacent both in the record and in memory
      uint64_t length = runs[i].length;
      while (j + 1 < runs.size() &&
             runs[j + 1].offset_in_chunk == runs[j].offset_in_chunk + runs[j].length &&
             runs[j + 1].dst == runs[j].dst + runs[j].length) {
        length += runs[++j].length;
      }
      std::span<std::byte> dst(runs[i].dst, length);
      read_record(start + runs[i].offset_in_chunk, dst);
      if (verify && whole) crc = Crc32(dst, crc);
      i = j + 1;
    }
    if (verify && whole) {
      CheckCrc(crc, item.crc, file.path(), what);
      ++stats_.chunks_verified;
    } else {
      ++stats_.chunks_unverified;
    }
    return;
  }
  // A strided tensor, or a partial read to verify: read the whole record.
  std::vector<std::byte> record(item.record_size);
  read_record(0, record);
  if (verify) {
    CheckCrc(Crc32(record), item.crc, file.path(), what);
    ++stats_.chunks_verified;
  } else {
    ++stats_.chunks_unverified;
  }
  std::vector<std::byte> rows;
  const std::byte* elements = record.data() + start;
  if (!t.IsContiguous()) {
    rows.resize(chunk.length);
    GatherRowMajor(t, record, rows.data());
    elements = rows.data();
  }
  for (const ReadRun& run : runs) std::memcpy(run.dst, elements + run.offset_in_chunk, run.length);
}

nlohmann::json DcpReader::ReadValue(const std::string& file, uint64_t offset, uint64_t length,
                                    const std::string& what) {
  ZipReader zip = OpenItem(file, offset, length, [&] { return what; });
  return TorchLoadJson(zip);
}

std::string DcpReader::ReadObject(const StoredObject& object) {
  nlohmann::json value = ReadValue(object.file, object.offset, object.length,
                                   fmt::format("object '{}'", object.unique_key));
  // Megatron stores the list [data of each local replica] under a unique key.
  if (value.is_array() && !value.empty()) value = value[0];
  return value.dump();
}

nlohmann::json DcpReader::ReadCommonState() {
  nlohmann::json common = nlohmann::json::object();
  const std::string path = JoinPath(dir_, kMegatronCommonFileName);
  if (env_->FileExists(path)) {
    std::unique_ptr<RandomAccessFile> f = env_->NewRandomAccessFile(path);
    ZipReader zip([&](uint64_t at, std::span<std::byte> dst) { f->Read(at, dst); }, f->size(),
                  path);
    common = TorchLoadJson(zip);
    if (!common.is_object()) {
      Fail(ErrorKind::kCorruption, "{}: holds a {}, not the common state dict", path,
           common.type_name());
    }
  } else {
    // The common dict is not one of the checkpoint's sharded objects: dropped
    // from `objects` once read (inspect would list it, diff compare it twice,
    // and a strict load would count it as unexpected).
    auto& objects = layout_.metadata.objects;
    for (auto it = objects.begin(); it != objects.end();) {
      if (it->second.key != kCommonStateKey) {
        ++it;
        continue;
      }
      common = nlohmann::json::parse(ReadObject(it->second));
      it = objects.erase(it);
    }
  }
  for (const DcpValueItem& v : layout_.values) {
    const std::string what = fmt::format("bytes item '{}'", fmt::join(v.path, "."));
    nlohmann::json* node = &common;
    for (size_t i = 0; node->is_object() && i + 1 < v.path.size(); ++i) {
      node = &(*node)[v.path[i]];
      if (node->is_null()) *node = nlohmann::json::object();
    }
    if (!node->is_object()) {
      Fail(ErrorKind::kCorruption, "{}: {} lies below a value that is not a dict",
           JoinPath(dir_, kDcpMetadataFileName), what);
    }
    (*node)[v.path.back()] = ReadValue(v.file, v.offset, v.length, what);
  }
  return common;
}

}  // namespace distckpt
