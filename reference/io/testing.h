// Test helpers shared by the io/ and format/ tests: a scoped temporary
// directory, string bytes and a gmock matcher for CheckpointError.
//
// Thread-safety: ScopedTempDir::path() may be read concurrently.
#ifndef DISTCKPT_IO_TESTING_H_
#define DISTCKPT_IO_TESTING_H_

#include <gmock/gmock.h>
#include <stdlib.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/error_testing.h"  // ThrowsError

namespace distckpt {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// on destruction, with the siblings a save of the directory itself leaves
// beside it: `<path>.lock` (the save lock) and `<path>.staging`.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "distckpt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  // Also removes the siblings a save of the directory itself leaves: its save
  // lock `<dir>.lock` and the staging directory of an overwrite `<dir>.staging`.
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::remove(path_ + ".lock", ec);
    std::filesystem::remove_all(path_ + ".staging", ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The bytes of `s`.
inline std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace distckpt

#endif  // DISTCKPT_IO_TESTING_H_
