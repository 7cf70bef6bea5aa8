#include "format/safetensors/safetensors.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_integer.h"
#include "core/json_parse.h"
#include "core/little_endian.h"

namespace distckpt {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the safetensors library's bound

struct NameOf {
  DType dtype;
  const char* name;
};
constexpr NameOf kNames[] = {
    {DType::kF64, "F64"},
    {DType::kF32, "F32"},
    {DType::kF16, "F16"},
    {DType::kBF16, "BF16"},
    {DType::kF8E4M3FN, "F8_E4M3"},
    {DType::kF8E5M2, "F8_E5M2"},
    {DType::kI8, "I8"},
    {DType::kI16, "I16"},
    {DType::kI32, "I32"},
    {DType::kI64, "I64"},
    {DType::kU8, "U8"},
    {DType::kBool, "BOOL"},
};

uint64_t Bytes(const SafetensorsEntry& e) {
  uint64_t n = DTypeSize(e.dtype);
  for (int64_t d : e.shape) {
    if (d < 0)
      Fail(ErrorKind::kInvalidArgument, "safetensors: tensor '{}' has a negative dim", e.name);
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) {
      Fail(ErrorKind::kInvalidArgument, "safetensors: tensor '{}' size overflows", e.name);
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

std::string SafetensorsDTypeName(DType dtype) {
  for (const NameOf& n : kNames) {
    if (n.dtype == dtype) return n.name;
  }
  Fail(ErrorKind::kUnsupported, "safetensors has no dtype {}", DTypeName(dtype));
}

DType SafetensorsDTypeFromName(const std::string& name, const std::string& source) {
  for (const NameOf& n : kNames) {
    if (name == n.name) return n.dtype;
  }
  Fail(ErrorKind::kCorruption, "{}: unsupported safetensors dtype '{}'", source, name);
}

SafetensorsWriter::SafetensorsWriter(Env* env, std::string path,
                                     std::vector<SafetensorsEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : env_(env), path_(std::move(path)), entries_(std::move(entries)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (SafetensorsEntry& e : entries_) {
    if (e.name.empty() || e.name == "__metadata__" || !names.insert(e.name).second) {
      Fail(ErrorKind::kInvalidArgument, "safetensors {}: bad or duplicate tensor name '{}'", path_,
           e.name);
    }
    e.begin = offset;
    e.end = offset += Bytes(e);
    header[e.name] = {{"dtype", SafetensorsDTypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix;
  AppendLittleEndian(prefix, text.size(), 8);
  file_ = env_->NewWritableFile(path_ + ".tmp");
  file_->Append(std::as_bytes(std::span(prefix)));
  file_->Append(std::as_bytes(std::span(text)));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  try {
    file_->Close();
    env_->RemoveFile(path_ + ".tmp");
  } catch (...) {
  }
}

uint64_t SafetensorsWriter::total_bytes() const {
  return entries_.empty() ? 0 : entries_.back().end;
}

void SafetensorsWriter::Append(std::span<const std::byte> bytes) {
  if (written_ + bytes.size() > total_bytes()) {
    Fail(ErrorKind::kInvalidArgument, "safetensors {}: {} bytes past the last tensor", path_,
         written_ + bytes.size() - total_bytes());
  }
  file_->Append(bytes);
  written_ += bytes.size();
}

void SafetensorsWriter::Finish() {
  if (written_ != total_bytes()) {
    Fail(ErrorKind::kInvalidArgument, "safetensors {}: {} of {} data bytes written", path_,
         written_, total_bytes());
  }
  file_->Sync();
  file_->Close();
  env_->RenameFile(path_ + ".tmp", path_);
  env_->SyncDir(DirName(path_));
  finished_ = true;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void SafetensorsFile::ReadTensor(const SafetensorsEntry& entry, std::span<std::byte> dst) const {
  if (dst.size() != entry.nbytes()) {
    Fail(ErrorKind::kInvalidArgument, "{}: tensor '{}' has {} bytes, destination {}", path,
         entry.name, entry.nbytes(), dst.size());
  }
  file->Read(data_start + entry.begin, dst);
}

SafetensorsFile OpenSafetensors(Env* env, const std::string& path) {
  SafetensorsFile f;
  f.path = path;
  f.file = env->NewRandomAccessFile(path);
  const uint64_t size = f.file->size();
  if (size < 8) Fail(ErrorKind::kCorruption, "{}: {} bytes, too short for safetensors", path, size);
  std::byte prefix[8];
  f.file->Read(0, prefix);
  const uint64_t n = LoadLittleEndian(prefix, 8);
  if (n > kMaxHeader || n > size - 8) {
    Fail(ErrorKind::kCorruption, "{}: header length {} exceeds the file ({} bytes) or 100 MiB",
         path, n, size);
  }
  std::string text(n, '\0');
  f.file->Read(8, std::as_writable_bytes(std::span(text)));
  nlohmann::json header = ParseJson(text, path + ": header");
  if (!header.is_object()) Fail(ErrorKind::kCorruption, "{}: header is not a JSON object", path);
  f.data_start = 8 + n;
  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : value.items()) f.metadata[k] = v.get<std::string>();
        continue;
      }
      SafetensorsEntry e;
      e.name = name;
      e.dtype = SafetensorsDTypeFromName(value.at("dtype").get<std::string>(), path);
      e.shape = JsonIntegers<int64_t>(value.at("shape"), path + ": tensor '" + name + "' shape");
      auto offsets = JsonIntegers<uint64_t>(value.at("data_offsets"),
                                            path + ": tensor '" + name + "' data_offsets");
      if (offsets.size() != 2 || offsets[0] > offsets[1]) {
        Fail(ErrorKind::kCorruption, "{}: tensor '{}' has bad data_offsets", path, name);
      }
      e.begin = offsets[0];
      e.end = offsets[1];
      SafetensorsEntry expect = e;
      if (Bytes(expect) != e.nbytes()) {
        Fail(ErrorKind::kCorruption, "{}: tensor '{}' spans {} bytes, its dtype and shape need {}",
             path, name, e.nbytes(), Bytes(expect));
      }
      f.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kCorruption, "{}: malformed header: {}", path, e.what());
  } catch (const CheckpointError& e) {
    if (e.kind() == ErrorKind::kCorruption) throw;
    Fail(ErrorKind::kCorruption, "{}: {}", path, e.what());
  }
  std::sort(f.entries.begin(), f.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t at = 0;
  for (const SafetensorsEntry& e : f.entries) {
    if (e.begin != at) {
      Fail(ErrorKind::kCorruption, "{}: tensor '{}' starts at {}, expected {} (gap or overlap)",
           path, e.name, e.begin, at);
    }
    at = e.end;
  }
  if (f.data_start + at != size) {
    Fail(ErrorKind::kCorruption, "{}: data section is {} bytes, tensors cover {}", path,
         size - f.data_start, at);
  }
  return f;
}

}  // namespace distckpt
