#include "format/dcp/sidecar_index.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/little_endian.h"
#include "io/checksum.h"

namespace distckpt {

std::string DcpIndexCacheDir() {
  if (const char* dir = std::getenv("DISTCKPT_INDEX_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/distckpt/index";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/distckpt/index";
  return "";
}

std::string DcpSidecarBeside(const std::string& data_path) { return data_path + kDcpSidecarSuffix; }

namespace {

std::string CanonicalPath(const std::string& path) {
  std::error_code error;
  std::string canonical = std::filesystem::weakly_canonical(path, error).string();
  if (error) canonical = std::filesystem::absolute(path).lexically_normal().string();
  return canonical;
}

std::string CacheName(const std::string& cache_dir, const std::string& key, const char* suffix) {
  return fmt::format("{}/{}{}", cache_dir,
                     ChecksumToHex(Checksum(std::as_bytes(std::span(key.data(), key.size())))),
                     suffix);
}

}  // namespace

std::string DcpSidecarCached(const std::string& cache_dir, const std::string& data_path,
                             uint64_t size) {
  return CacheName(cache_dir, fmt::format("{}\n{}", CanonicalPath(data_path), size),
                   kDcpSidecarSuffix);
}

std::string DcpSidecarSizeRecord(const std::string& cache_dir, const std::string& data_path) {
  return CacheName(cache_dir, CanonicalPath(data_path), kDcpSidecarSizeSuffix);
}

std::string WriteDcpSidecarCached(Env* env, const std::string& cache_dir,
                                  const std::string& data_path, uint64_t size,
                                  const std::string& index) {
  const std::string sidecar = DcpSidecarCached(cache_dir, data_path, size);
  WriteFileAtomic(env, sidecar, index);
  WriteFileAtomic(env, DcpSidecarSizeRecord(cache_dir, data_path),
                  fmt::format("{} {}\n", size, CanonicalPath(data_path)));
  return sidecar;
}

std::optional<uint64_t> ReadDcpSidecarSize(Env* env, const std::string& cache_dir,
                                           const std::string& data_path) {
  try {
    const std::string record = DcpSidecarSizeRecord(cache_dir, data_path);
    if (!env->FileExists(record) || env->FileSize(record) > 4096) return std::nullopt;
    const std::string text = ReadFileToString(env, record);
    uint64_t size = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), size);
    if (error != std::errc() || end == text.data() || end == text.data() + text.size() ||
        *end != ' ') {
      return std::nullopt;
    }
    return size;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

constexpr uint32_t kDescriptorSignature = 0x08074b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint64_t kHeaderWindow = 256;

uint64_t Load(const std::byte* p, int bytes) { return LoadLittleEndian(p, bytes); }

}  // namespace

bool DcpRecordBound(const RandomAccessFile& file, const DcpIndexEntry& e, uint64_t item_offset,
                    uint64_t item_end, std::atomic<uint64_t>* bytes_read) {
  try {
    const uint64_t end = e.data_offset + e.data_size;
    if (e.data_offset < item_offset || end > item_end || item_end > file.size()) return false;
    // The data descriptor (general purpose flag bit 3: torch's writer): 16
    // bytes, 24 with zip64 sizes (read only when the short form does not fit).
    if (item_end - end >= 16) {
      std::vector<std::byte> d(16);
      file.Read(end, d);
      *bytes_read += d.size();
      if (Load(d.data(), 4) == kDescriptorSignature) {
        if (Load(d.data() + 4, 4) != e.crc) return false;
        if (Load(d.data() + 8, 4) == e.data_size && Load(d.data() + 12, 4) == e.data_size)
          return true;
        if (item_end - end < 24) return false;
        d.resize(24);
        file.Read(end, d);
        *bytes_read += d.size();
        return Load(d.data() + 8, 8) == e.data_size && Load(d.data() + 16, 8) == e.data_size;
      }
    }
    // Else the local header that ends where the record begins.
    std::vector<std::byte> w(std::min(kHeaderWindow, e.data_offset - item_offset));
    if (w.size() < 30) return false;
    const uint64_t from = e.data_offset - w.size();
    file.Read(from, w);
    *bytes_read += w.size();
    for (size_t p = 0; p + 30 <= w.size(); ++p) {
      if (Load(w.data() + p, 4) != kLocalHeaderSignature) continue;
      const uint64_t names = Load(w.data() + p + 26, 2), extra = Load(w.data() + p + 28, 2);
      if (p + 30 + names + extra != w.size()) continue;
      if (Load(w.data() + p + 6, 2) & 8) return false;  // sizes in a descriptor, which is not there
      if (Load(w.data() + p + 14, 4) != e.crc) return false;
      uint64_t compressed = Load(w.data() + p + 18, 4), size = Load(w.data() + p + 22, 4);
      if (compressed == 0xffffffff || size == 0xffffffff) {  // zip64 extra field
        for (uint64_t x = p + 30 + names; x + 4 <= w.size();) {
          const uint64_t id = Load(w.data() + x, 2), n = Load(w.data() + x + 2, 2);
          if (id == 1 && n >= 16 && x + 4 + n <= w.size()) {
            size = Load(w.data() + x + 4, 8);
            compressed = Load(w.data() + x + 12, 8);
            break;
          }
          x += 4 + n;
        }
      }
      return size == e.data_size && compressed == e.data_size;
    }
    return false;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace distckpt
