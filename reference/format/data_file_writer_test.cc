// DataFileWriter's own file handling: small appends held back and joined to
// the next larger write, patches of bytes in the file or still held back,
// held appends (queued, not copied); the file must hold exactly what was
// appended and patched.
#include "format/data_file_writer.h"

#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <random>

#include "io/testing.h"

namespace distckpt {
namespace {

// A format whose items are what the test appends: the file operations of
// DataFileWriter made callable.
class TestWriter : public DataFileWriter {
 public:
  TestWriter(Env* env, const std::string& dir)
      : DataFileWriter(env, dir, /*rank=*/0, "__0_0.bin", CheckpointMetadata{}) {}
  using DataFileWriter::Append;
  using DataFileWriter::AppendChecksums;
  using DataFileWriter::AppendHeld;
  using DataFileWriter::Overwrite;

 private:
  void StoreChunk(const StoredTensor&, StoredChunk&, std::span<const std::byte>) override {}
  void StoreObject(StoredObject&, std::span<const std::byte>) override {}
};

// Random scripts of small, large and held appends and of patches anywhere
// in what was appended (in the file, held back, or across both): the file
// equals the same operations on a string, the small and held appends never
// reach the file on their own, and a patch of held bytes still queued is
// refused, patching nothing.
TEST(DataFileWriterTest, HeldBackAppendsAndPatchesGiveTheSameFile) {
  std::mt19937_64 rng(5);
  int patches_across = 0, patches_pending = 0, patches_in_file = 0, patches_held = 0;
  for (int script = 0; script < 150; ++script) {
    ScopedTempDir tmp;
    CountingEnv env(Env::Default());
    TestWriter writer(&env, tmp.path());
    std::string model;
    std::deque<std::string> held;                        // alive until Finish
    std::vector<std::pair<size_t, size_t>> held_ranges;  // in `model`
    int large_writes = 0, writes_at = 0;
    auto random_bytes = [&](size_t n) {
      std::string s(n, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      return s;
    };
    for (int op = 0; op < 60; ++op) {
      const uint64_t kind = rng() % 10;
      if (kind < 5) {  // small
        const std::string s = random_bytes(rng() % 300);
        EXPECT_EQ(writer.Append(Bytes(s)), model.size());
        model += s;
      } else if (kind < 7) {  // large
        const std::string s = random_bytes(4096 + rng() % 20000);
        EXPECT_EQ(writer.Append(Bytes(s)), model.size());
        model += s;
        ++large_writes;
      } else if (kind < 8) {  // held
        const std::string& s = held.emplace_back(random_bytes(rng() % 9000));
        EXPECT_EQ(writer.AppendHeld(Bytes(s)), model.size());
        if (s.size() >= 4096) held_ranges.emplace_back(model.size(), model.size() + s.size());
        model += s;
      } else if (!model.empty()) {  // patch
        const std::string path = JoinPath(tmp.path(), "__0_0.bin");
        const uint64_t in_file =
            std::filesystem::exists(path) ? std::filesystem::file_size(path) : 0;
        // Anywhere, just before the held-back bytes, or among them.
        const uint64_t where = rng() % 3;
        size_t at = rng() % model.size();
        if (where == 1 && in_file > 0) at = in_file - 1 - rng() % std::min<uint64_t>(in_file, 32);
        if (where == 2 && in_file < model.size()) at = in_file + rng() % (model.size() - in_file);
        const std::string s = random_bytes(1 + rng() % std::min<size_t>(64, model.size() - at));
        const bool on_held = std::ranges::any_of(held_ranges, [&](auto r) {
          return r.first >= in_file && at < r.second && at + s.size() > r.first;
        });
        if (on_held) {
          ++patches_held;
          EXPECT_THROW(writer.Overwrite(at, Bytes(s)), CheckpointError);
          continue;
        }
        patches_across += at < in_file && at + s.size() > in_file;
        patches_pending += at >= in_file;
        patches_in_file += at + s.size() <= in_file;
        writes_at += at < in_file;
        writer.Overwrite(at, Bytes(s));
        model.replace(at, s.size(), s);
      }
    }
    const int writes_before_finish = env.writes;
    writer.Finish();
    EXPECT_TRUE(ReadFileToString(Env::Default(), JoinPath(tmp.path(), "__0_0.bin")) == model)
        << "script " << script;
    // Small and held appends join a large write, or go out when 60 KiB of
    // small ones or 1 MiB in all wait.
    EXPECT_LE(writes_before_finish,
              large_writes + writes_at + static_cast<int>(model.size() / (60 << 10)));
  }
  EXPECT_GE(patches_across, 20);
  EXPECT_GE(patches_pending, 100);
  EXPECT_GE(patches_in_file, 100);
  EXPECT_GE(patches_held, 20);
}

// A run of held chunks and their checksums goes out in gathered writes of
// about 1 MiB: 2 MiB of 64 KiB chunks in two system calls, not 64 (a write
// goes out once 1 MiB is queued; the last chunk's checksums wait for Finish).
TEST(DataFileWriterTest, HeldAppendsGoOutInWritesOfAboutOneMiB) {
  ScopedTempDir tmp;
  CountingEnv env(Env::Default());
  TestWriter writer(&env, tmp.path());
  const std::string chunk(64 << 10, 'c'), sums(128, 's');
  std::string model;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(writer.AppendHeld(Bytes(chunk)), model.size());
    writer.AppendChecksums(Bytes(sums), /*held=*/true);
    model += chunk + sums;
  }
  EXPECT_EQ(env.writes, 2);
  writer.Finish();
  EXPECT_EQ(env.writes, 3);
  EXPECT_EQ(writer.bytes_written(), 32u * chunk.size());
  EXPECT_TRUE(ReadFileToString(Env::Default(), JoinPath(tmp.path(), "__0_0.bin")) == model);
}

}  // namespace
}  // namespace distckpt
