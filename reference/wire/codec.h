// The byte codec of rank-to-rank messages: fixed-width little-endian
// integers, length-prefixed strings and lists. Independent of every file
// format: a message is never written to disk, so it carries no version of
// its own beyond the tag byte each message kind starts with (wire/messages.h).
//
// WireReader never reads past its input: a short or malformed message is
// CheckpointError(kComm) "malformed <what> from rank R: ..." (a rank of
// another build, or memory corruption; never bad user input).
//
// Thread-safety: a writer or reader is used by one thread.
#ifndef DISTCKPT_WIRE_CODEC_H_
#define DISTCKPT_WIRE_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distckpt {

class WireWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Str(std::string_view s);
  void I64s(const std::vector<int64_t>& values);
  void U64s(const std::vector<uint64_t>& values);
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  // `what` and `from_rank` name the message in errors.
  WireReader(std::string_view in, std::string_view what, int from_rank)
      : in_(in), what_(what), from_rank_(from_rank) {}

  uint8_t U8();
  uint64_t U64();
  int64_t I64() { return static_cast<int64_t>(U64()); }
  bool Bool();
  std::string Str();
  std::vector<int64_t> I64s();
  std::vector<uint64_t> U64s();
  // A count of elements of at least `min_bytes` each: refuses one the rest of
  // the message cannot hold (so a bad count never allocates).
  uint64_t Count(size_t min_bytes);
  size_t Remaining() const { return in_.size(); }
  // Throws unless the whole message was read.
  void ExpectEnd();
  [[noreturn]] void Malformed(std::string_view problem) const;

 private:
  std::string_view Take(size_t n);

  std::string_view in_;
  std::string_view what_;
  int from_rank_;
};

}  // namespace distckpt

#endif  // DISTCKPT_WIRE_CODEC_H_
