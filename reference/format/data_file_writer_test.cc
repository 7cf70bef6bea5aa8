// DataFileWriter's own file handling: small appends held back and joined to
// the next larger write, patches of bytes in the file or still held back,
// gathered appends; the file must hold exactly what was appended and patched.
#include "format/data_file_writer.h"

#include <gtest/gtest.h>

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
  using DataFileWriter::AppendGathered;
  using DataFileWriter::Overwrite;

 private:
  void StoreChunk(const StoredTensor&, StoredChunk&, std::span<const std::byte>) override {}
  void StoreObject(StoredObject&, std::span<const std::byte>) override {}
};

// Random scripts of small, large and gathered appends and of patches
// anywhere in what was appended (in the file, held back, or across both):
// the file equals the same operations on a string, and the small appends
// never reach the file on their own.
TEST(DataFileWriterTest, HeldBackAppendsAndPatchesGiveTheSameFile) {
  std::mt19937_64 rng(5);
  int patches_across = 0, patches_pending = 0, patches_in_file = 0;
  for (int script = 0; script < 150; ++script) {
    ScopedTempDir tmp;
    CountingEnv env(Env::Default());
    TestWriter writer(&env, tmp.path());
    std::string model;
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
      } else if (kind < 8) {  // gathered
        const std::string a = random_bytes(rng() % 5000), b = random_bytes(rng() % 100);
        const std::span<const std::byte> parts[] = {Bytes(a), Bytes(b)};
        EXPECT_EQ(writer.AppendGathered(parts, a.size()), model.size());
        model += a + b;
        ++large_writes;
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
    // Small appends join a large write, or go out when 60 KiB and more wait.
    EXPECT_LE(writes_before_finish,
              large_writes + writes_at + static_cast<int>(model.size() / (60 << 10)));
  }
  EXPECT_GE(patches_across, 20);
  EXPECT_GE(patches_pending, 100);
  EXPECT_GE(patches_in_file, 100);
}

}  // namespace
}  // namespace distckpt
