#include "wire/codec.h"

#include <cstring>

#include "core/error.h"
#include "core/little_endian.h"

namespace distckpt {

void WireWriter::U64(uint64_t v) { AppendLittleEndian(out_, v, 8); }

void WireWriter::Str(std::string_view s) {
  U64(s.size());
  out_.append(s);
}

void WireWriter::I64s(const std::vector<int64_t>& values) {
  U64(values.size());
  for (int64_t v : values) I64(v);
}

void WireWriter::U64s(const std::vector<uint64_t>& values) {
  U64(values.size());
  for (uint64_t v : values) U64(v);
}

void WireReader::Malformed(std::string_view problem) const {
  Fail(ErrorKind::kComm, "malformed {} from rank {}: {}", what_, from_rank_, problem);
}

std::string_view WireReader::Take(size_t n) {
  if (n > in_.size()) {
    Malformed(fmt::format("needs {} more bytes, {} left", n, in_.size()));
  }
  std::string_view out = in_.substr(0, n);
  in_.remove_prefix(n);
  return out;
}

uint8_t WireReader::U8() { return static_cast<uint8_t>(Take(1)[0]); }

uint64_t WireReader::U64() { return LoadLittleEndian(Take(8).data(), 8); }

bool WireReader::Bool() {
  const uint8_t v = U8();
  if (v > 1) Malformed(fmt::format("boolean byte {}", v));
  return v == 1;
}

uint64_t WireReader::Count(size_t min_bytes) {
  const uint64_t n = U64();
  if (min_bytes > 0 && n > in_.size() / min_bytes) {
    Malformed(fmt::format("a count of {} does not fit the {} bytes left", n, in_.size()));
  }
  return n;
}

std::string WireReader::Str() {
  const uint64_t n = Count(1);
  return std::string(Take(n));
}

std::vector<int64_t> WireReader::I64s() {
  std::vector<int64_t> out(Count(8));
  for (int64_t& v : out) v = I64();
  return out;
}

std::vector<uint64_t> WireReader::U64s() {
  std::vector<uint64_t> out(Count(8));
  for (uint64_t& v : out) v = U64();
  return out;
}

void WireReader::ExpectEnd() {
  if (!in_.empty()) Malformed(fmt::format("{} bytes after its end", in_.size()));
}

}  // namespace distckpt
