// distckpt's one error type.
//
// Every failure the library reports is a CheckpointError carrying an
// ErrorKind; the message names what a user needs to act on (key, file, rank,
// topology). Kinds map onto the CLI's exit codes (see cli/): every kind is an
// input/usage error (exit 2) except where the CLI checks a verdict.
//
// Thread-safety: immutable value type.
#ifndef DISTCKPT_CORE_ERROR_H_
#define DISTCKPT_CORE_ERROR_H_

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace distckpt {

enum class ErrorKind {
  kInvalidArgument,  // malformed request or option (bad topology string, dtype name...)
  kInvalidSharding,  // metadata integrity / coverage (gaps, overlaps) violations
  kKeyMismatch,      // missing / unexpected keys (strict handling)
  kShapeMismatch,    // global shape or dtype differs between request and checkpoint
  kCorruption,       // checksum mismatch, malformed metadata, truncated file
  kIncomplete,       // not a (committed) checkpoint
  kIo,               // an operating-system I/O error (ENOSPC, EACCES...)
  kUnsupported,      // valid input we do not handle
  kComm,             // a collective failed or another rank aborted
};

std::string_view ErrorKindName(ErrorKind kind);

class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Throws CheckpointError(kind, fmt::format(format, args...)).
template <typename... Args>
[[noreturn]] void Fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw CheckpointError(kind, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace distckpt

#endif  // DISTCKPT_CORE_ERROR_H_
