// The zip container of torch.save (PyTorch's PyTorchStreamWriter /
// PyTorchStreamReader): every record STORED under "<prefix>/<name>".
//
// ZipWriter writes what torch 1.13 and 2.x both load, byte for byte like
// fixtures/dcp/tools/dcp_rawwrite.py: local headers carry CRC32 (zlib) and sizes,
// no data descriptors, each record's data starts at a multiple of 64 bytes
// from the start of the archive (an "FB" extra field of 'Z' padding),
// central directory, classic end record. Records or offsets that do not fit
// 32 bits get zip64 extra fields and a zip64 end record + locator.
//
// ZipReader reads any stored zip (torch's own flavour included: data
// descriptors, zip64 end records, sizes only in the central directory)
// through a ReadFn over offsets relative to the archive start, so a caller
// can point it at one item inside a .distcp file and fetch only the bytes it
// needs. Damage is CheckpointError(kCorruption) naming `source`; compressed
// records are kUnsupported.
//
// Thread-safety: a ZipReader is immutable after construction (its ReadFn
// must be safe to call concurrently if the reader is shared).
#ifndef DISTCKPT_FORMAT_DCP_TORCH_ZIP_H_
#define DISTCKPT_FORMAT_DCP_TORCH_ZIP_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace distckpt {

uint32_t Crc32(std::span<const std::byte> data, uint32_t crc = 0);

class ZipWriter {
 public:
  using Sink = std::function<void(std::span<const std::byte>)>;
  // Overwrites bytes the sink took, at `offset` from the archive's start.
  using Patch = std::function<void(uint64_t offset, std::span<const std::byte>)>;
  // `force_zip64` writes zip64 fields even for small archives (tests);
  // `patch` is needed by AddStreamedRecord only.
  explicit ZipWriter(Sink sink, std::string prefix = "archive", bool force_zip64 = false,
                     Patch patch = nullptr);

  // Returns the offset of the record's first data byte in the archive.
  uint64_t AddRecord(std::string_view name, std::span<const std::byte> data);
  uint64_t AddRecord(std::string_view name, std::string_view data) {
    return AddRecord(name, std::as_bytes(std::span(data.data(), data.size())));
  }
  // A record of `size` bytes that `write` streams to the sink it is given,
  // returning their CRC32 (so the data is read once, hashed piece by piece
  // while cached); the local header's CRC is then patched. The bytes are
  // exactly what AddRecord would write.
  uint64_t AddStreamedRecord(std::string_view name, uint64_t size,
                             const std::function<uint32_t(const Sink&)>& write);
  // Writes the central directory and end records; the writer is done.
  void Finish();
  uint64_t size() const { return offset_; }

 private:
  struct Central {
    size_t name_at;  // in names_
    size_t name_size;
    uint32_t crc;
    uint64_t size;
    uint64_t offset;
  };
  void Put(const std::string& bytes);
  std::string_view Name(const Central& c) const {
    return std::string_view(names_).substr(c.name_at, c.name_size);
  }
  // Writes a record's local header; returns where its data starts.
  uint64_t PutLocalHeader(std::string_view name, uint32_t crc, uint64_t size);

  Sink sink_;
  Patch patch_;
  std::string prefix_;
  bool force_zip64_;
  uint64_t offset_ = 0;
  std::vector<Central> central_;
  std::string names_;  // the records' full names, back to back
  std::string buf_;    // a header or the central directory being written
};

// A whole archive in memory.
std::string ZipToString(const std::function<void(ZipWriter&)>& records);

class ZipReader {
 public:
  // Reads dst.size() bytes at `offset` from the start of the archive.
  using ReadFn = std::function<void(uint64_t offset, std::span<std::byte> dst)>;
  struct Entry {
    std::string name;  // without the prefix
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t header_offset = 0;
    uint16_t method = 0;
  };

  ZipReader(ReadFn read, uint64_t size, std::string source);
  // An archive held in memory (the view must outlive the reader).
  ZipReader(std::string_view bytes, std::string source);

  const std::string& prefix() const { return prefix_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* Find(std::string_view name) const;
  const Entry& Get(std::string_view name) const;  // kCorruption when missing
  // Offset of the record's first data byte (reads its local header).
  uint64_t DataOffset(const Entry& entry) const;
  // Where the central directory starts: the archive's last `size() -
  // directory_offset()` bytes are the directory and the end records.
  uint64_t directory_offset() const { return directory_offset_; }
  uint64_t size() const { return size_; }
  // The whole record, its CRC32 checked.
  std::string ReadRecord(const Entry& entry) const;
  void Read(uint64_t offset, std::span<std::byte> dst) const;
  const std::string& source() const { return source_; }

 private:
  void Parse();

  ReadFn read_;
  uint64_t size_;
  std::string source_;
  std::string prefix_;
  uint64_t directory_offset_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_TORCH_ZIP_H_
