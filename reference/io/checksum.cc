#include "io/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
// The library's run-time dispatch: the AVX2 (or AVX-512) kernel where the CPU
// has it, SSE2 otherwise; the same hash values. The plain entry points are
// SSE2 only: about 3x slower on data in cache (bench/README.md, "Verified
// loads"). The header redirects XXH3_64bits* to the *_dispatch functions.
#include <xxh_x86dispatch.h>
#endif

#include "core/error.h"

namespace distckpt {

uint64_t Checksum(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

uint64_t Checksum(std::span<const std::byte> data, uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

void AppendChecksumHex(uint64_t checksum, std::string& out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char hex[16];
  for (int i = 15; i >= 0; --i, checksum >>= 4) hex[i] = kDigits[checksum & 0xf];
  out.append(hex, sizeof(hex));
}

std::string ChecksumToHex(uint64_t checksum) {
  std::string out;
  AppendChecksumHex(checksum, out);
  return out;
}

uint64_t ChecksumFromHex(const std::string& hex) {
  uint64_t value = 0;
  bool ok = hex.size() == 16;
  for (size_t i = 0; ok && i < hex.size(); ++i) {
    char c = hex[i];
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    ok = digit >= 0;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  if (!ok)
    Fail(ErrorKind::kCorruption, "malformed checksum '{}' (want 16 lower-case hex digits)", hex);
  return value;
}

struct Checksummer::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Checksummer::Checksummer() : state_(std::make_unique<State>()) {
  if (state_->xxh == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->xxh);
}

Checksummer::Checksummer(uint64_t seed) : state_(std::make_unique<State>()) {
  if (state_->xxh == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset_withSeed(state_->xxh, seed);
}

Checksummer::~Checksummer() = default;

void Checksummer::Reset(uint64_t seed) { XXH3_64bits_reset_withSeed(state_->xxh, seed); }

void Checksummer::Update(std::span<const std::byte> data) {
  XXH3_64bits_update(state_->xxh, data.data(), data.size());
}

uint64_t Checksummer::Digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace distckpt
