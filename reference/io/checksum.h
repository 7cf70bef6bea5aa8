// Chunk checksums: xxHash3 64-bit (seed 0), one-shot or streamed over pieces
// that arrive in order. Printed as 16 lower-case hex digits.
//
// Thread-safety: Checksummer objects are not shared between threads.
#ifndef DISTCKPT_IO_CHECKSUM_H_
#define DISTCKPT_IO_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace distckpt {

uint64_t Checksum(std::span<const std::byte> data);
// XXH3_64bits_withSeed: a checksum bound to context (the seed), so equal
// bytes stored under another key or position do not verify.
uint64_t Checksum(std::span<const std::byte> data, uint64_t seed);
std::string ChecksumToHex(uint64_t checksum);
void AppendChecksumHex(uint64_t checksum, std::string& out);  // ChecksumToHex appended
uint64_t ChecksumFromHex(const std::string& hex);  // throws kCorruption on malformed input

class Checksummer {
 public:
  Checksummer();
  explicit Checksummer(uint64_t seed);  // XXH3_64bits_withSeed's value, streamed
  ~Checksummer();
  void Reset(uint64_t seed);  // starts over, as Checksummer(seed) (no allocation)
  void Update(std::span<const std::byte> data);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_CHECKSUM_H_
