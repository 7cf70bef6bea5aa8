#include "io/storage_path.h"

#include <cctype>

#include "core/error.h"
#include "core/printable.h"

namespace distckpt {

StoragePath EnvForPath(const std::string& uri) {
  const size_t colon = uri.find("://");
  // A scheme is letters, digits, '+', '-', '.' starting with a letter (RFC 3986).
  bool is_scheme = colon != std::string::npos && colon > 0 && std::isalpha(uri[0]);
  for (size_t i = 0; is_scheme && i < colon; ++i) {
    const char c = uri[i];
    is_scheme = std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  }
  if (!is_scheme) {
    if (uri.empty()) Fail(ErrorKind::kInvalidArgument, "empty path");
    return {Env::Default(), uri};
  }
  std::string scheme = uri.substr(0, colon);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string rest = uri.substr(colon + 3);
  if (scheme == "file") {
    const size_t slash = rest.find('/');
    const std::string host = rest.substr(0, slash);
    if (slash == std::string::npos || (!host.empty() && host != "localhost")) {
      Fail(ErrorKind::kInvalidArgument,
           "{}: a file:// URI names a local absolute path (file:///path), not host '{}'",
           Printable(uri, 300), Printable(host));
    }
    return {Env::Default(), rest.substr(slash)};
  }
  if (scheme == "s3") {
    const std::string bucket = rest.substr(0, rest.find('/'));
    if (bucket.empty()) {
      Fail(ErrorKind::kInvalidArgument, "{}: an s3:// URI names a bucket (s3://bucket/prefix)",
           Printable(uri, 300));
    }
    Fail(ErrorKind::kUnsupported,
         "{}: S3 storage is not available in this distckpt build (no S3 Env); use a local "
         "path or file:// URI",
         Printable(uri, 300));
  }
  Fail(ErrorKind::kInvalidArgument,
       "{}: unknown storage scheme '{}://' (a path, file:///path or s3://bucket/prefix)",
       Printable(uri, 300), Printable(scheme));
}

}  // namespace distckpt
