#include "core/error.h"

namespace distckpt {

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kInvalidSharding:
      return "invalid sharding";
    case ErrorKind::kKeyMismatch:
      return "key mismatch";
    case ErrorKind::kShapeMismatch:
      return "shape mismatch";
    case ErrorKind::kCorruption:
      return "corruption";
    case ErrorKind::kIncomplete:
      return "incomplete checkpoint";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kComm:
      return "communication error";
  }
  return "unknown";
}

}  // namespace distckpt
