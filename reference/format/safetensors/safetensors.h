// The safetensors file format (Hugging Face), written and read by our own
// code: 8 bytes little-endian N, an N-byte UTF-8 JSON header
// {"__metadata__": {str: str}, NAME: {"dtype": "BF16", "shape": [..],
// "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of
// 8, then the tensors' little-endian bytes, back to back, offsets relative
// to the end of the header. Our writer lays tensors out in the order given.
//
// SafetensorsWriter streams: the header is computed from the entries up
// front, then each tensor's bytes are appended in order (in pieces of any
// size), so memory stays bounded by the caller's buffers. The file is
// written to PATH.tmp and renamed into place by Finish (after fsync).
//
// OpenSafetensors checks the header (size bound, JSON, dtype names, shapes,
// offsets that tile the data section exactly, file size) and throws
// CheckpointError(kCorruption) naming the file and tensor otherwise.
//
// Thread-safety: a writer belongs to one thread; a reader's ReadTensor may
// be called concurrently.
#ifndef DISTCKPT_FORMAT_SAFETENSORS_SAFETENSORS_H_
#define DISTCKPT_FORMAT_SAFETENSORS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "io/env.h"

namespace distckpt {

// "F32", "BF16", "F8_E4M3", ...; kUnsupported for a dtype safetensors lacks.
std::string SafetensorsDTypeName(DType dtype);
// kCorruption naming `source` for an unknown name.
DType SafetensorsDTypeFromName(const std::string& name, const std::string& source);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // data offsets (filled by the writer / the reader)
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsWriter {
 public:
  // Entries in file order; names unique. kInvalidArgument otherwise.
  SafetensorsWriter(Env* env, std::string path, std::vector<SafetensorsEntry> entries,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // an unfinished file's temp is removed
  // Appends bytes of the current tensor (crossing into the next when it is full).
  void Append(std::span<const std::byte> bytes);
  void Finish();  // kInvalidArgument if bytes are missing
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  uint64_t total_bytes() const;  // data section

 private:
  Env* env_;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::unique_ptr<WritableFile> file_;
  uint64_t written_ = 0;
  bool finished_ = false;
};

struct SafetensorsFile {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;  // by offset
  uint64_t data_start = 0;
  std::unique_ptr<RandomAccessFile> file;

  const SafetensorsEntry* Find(const std::string& name) const;
  // Reads all of tensor `name` (kKeyMismatch if absent) into `dst` (its size).
  void ReadTensor(const SafetensorsEntry& entry, std::span<std::byte> dst) const;
};

SafetensorsFile OpenSafetensors(Env* env, const std::string& path);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_SAFETENSORS_SAFETENSORS_H_
