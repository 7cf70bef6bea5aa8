#include "io/env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <random>
#include <thread>

#include "io/fault_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

void WriteFile(Env* env, const std::string& path, const std::string& contents) {
  std::unique_ptr<WritableFile> file = env->NewWritableFile(path);
  file->Append(Bytes(contents));
  file->Close();
}

TEST(JoinPathTest, InsertsOneSeparator) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
}

TEST(PosixEnvTest, AppendsAndReadsBack) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string path = JoinPath(tmp.path(), "f");
  std::unique_ptr<WritableFile> file = env->NewWritableFile(path);
  file->Append(Bytes("hello "));
  file->Append(Bytes("world"));
  EXPECT_EQ(file->size(), 11u);
  file->Sync();
  file->Close();
  file->Close();  // idempotent
  EXPECT_TRUE(env->FileExists(path));
  EXPECT_FALSE(env->IsDirectory(path));
  EXPECT_EQ(env->FileSize(path), 11u);

  std::unique_ptr<RandomAccessFile> in = env->NewRandomAccessFile(path);
  EXPECT_EQ(in->size(), 11u);
  EXPECT_EQ(in->path(), path);
  std::string got(5, '\0');
  in->Read(6, std::as_writable_bytes(std::span(got.data(), got.size())));
  EXPECT_EQ(got, "world");
  EXPECT_EQ(ReadFileToString(env, path), "hello world");
}

// More parts than one writev takes (IOV_MAX), of random sizes, empty ones
// among them: the file is their concatenation.
TEST(PosixEnvTest, AppendGatheredWritesThePartsInOrder) {
  ScopedTempDir tmp;
  const std::string path = JoinPath(tmp.path(), "f");
  std::mt19937 rng(3);
  std::vector<std::string> strings(3000);
  std::string want = "head";
  for (std::string& s : strings) {
    s.resize(rng() % 4 == 0 ? 0 : rng() % 5000);
    for (char& c : s) c = static_cast<char>(rng());
  }
  std::vector<std::span<const std::byte>> parts;
  for (const std::string& s : strings) {
    parts.push_back(Bytes(s));
    want += s;
  }
  std::unique_ptr<WritableFile> file = Env::Default()->NewWritableFile(path);
  file->Append(Bytes("head"));
  file->AppendGathered(parts);
  EXPECT_EQ(file->size(), want.size());
  file->AppendGathered({});
  file->Close();
  EXPECT_GT(want.size(), 4000000u);
  EXPECT_TRUE(ReadFileToString(Env::Default(), path) == want);
}

// A file size limit cuts a gathered write short in the middle of a part:
// the bytes before the limit are in the file, in order, and the next write
// fails naming the path.
TEST(PosixEnvTest, AppendGatheredReportsAShortWriteThenTheError) {
  ScopedTempDir tmp;
  const std::string path = JoinPath(tmp.path(), "f");
  const std::string a(3000, 'a'), b(5000, 'b'), c(100, 'c');
  std::vector<std::span<const std::byte>> parts = {Bytes(a), Bytes(b), Bytes(c)};
  std::unique_ptr<WritableFile> file = Env::Default()->NewWritableFile(path);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit limited = old;
  limited.rlim_cur = 4096;
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string error;
  try {
    file->AppendGathered(parts);
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_EQ(file->size(), 4096u);
  file->Close();
  EXPECT_EQ(ReadFileToString(Env::Default(), path), a + std::string(1096, 'b'));
}

TEST(PosixEnvTest, WriteAtOverwritesAppendedBytes) {
  ScopedTempDir tmp;
  const std::string path = JoinPath(tmp.path(), "f");
  std::unique_ptr<WritableFile> file = Env::Default()->NewWritableFile(path);
  file->Append(Bytes("hello "));
  file->WriteAt(1, Bytes("EL"));
  file->Append(Bytes("world"));
  EXPECT_EQ(file->size(), 11u);
  file->Close();
  EXPECT_EQ(ReadFileToString(Env::Default(), path), "hELlo world");
}

TEST(PosixEnvTest, ConcurrentReadsShareOneFile) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string path = JoinPath(tmp.path(), "f");
  std::string contents;
  for (int i = 0; i < 4096; ++i) contents.push_back(static_cast<char>(i * 7));
  WriteFile(env, path, contents);
  std::unique_ptr<RandomAccessFile> in = env->NewRandomAccessFile(path);
  std::vector<std::thread> threads;
  std::vector<std::string> got(8, std::string(512, '\0'));
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back(
        [&, t] { in->Read(512 * t, std::as_writable_bytes(std::span(got[t].data(), 512))); });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(got[t], contents.substr(512 * t, 512)) << t;
}

TEST(PosixEnvTest, ReadPastEndIsTruncation) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string path = JoinPath(tmp.path(), "short.bin");
  WriteFile(env, path, "0123456789");
  std::unique_ptr<RandomAccessFile> in = env->NewRandomAccessFile(path);
  std::vector<std::byte> dst(8);
  EXPECT_THAT([&] { in->Read(5, dst); },
              ThrowsError(ErrorKind::kCorruption,
                          "truncated file " + path + ": wanted 8 bytes at offset 5, file has 10"));
  EXPECT_NO_THROW(in->Read(2, dst));
}

// ReadGathered: the bytes of Read of each part in turn, from 1 to 8 parts
// (empty ones too) at random offsets; past the end, the error Read gives for
// the first part that does not fit, whether the call reads none of the parts
// or a short prefix.
TEST(PosixEnvTest, ReadGatheredReadsWhatReadsOfEachPartRead) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string path = JoinPath(tmp.path(), "f");
  std::mt19937 rng(11);
  std::string contents(300000, '\0');
  for (char& c : contents) c = static_cast<char>(rng());
  WriteFile(env, path, contents);
  std::unique_ptr<RandomAccessFile> in = env->NewRandomAccessFile(path);
  int past_end = 0, short_prefix = 0;
  for (int i = 0; i < 400; ++i) {
    const uint64_t offset = rng() % contents.size();
    std::vector<std::vector<std::byte>> bufs(1 + rng() % 8);
    std::vector<std::span<std::byte>> parts;
    uint64_t total = 0;
    for (auto& b : bufs) {
      b.resize(rng() % 3 == 0 ? 0 : rng() % 70000);
      parts.push_back(b);
      total += b.size();
    }
    // What Read of each part in turn gives: the bytes, or the first error.
    std::string want, error;
    uint64_t at = offset;
    for (const auto& b : bufs) {
      if (at + b.size() > contents.size()) {
        error = fmt::format("truncated file {}: wanted {} bytes at offset {}, file has {}", path,
                            b.size(), at, contents.size());
        break;
      }
      want += contents.substr(at, b.size());
      at += b.size();
    }
    if (error.empty()) {
      in->ReadGathered(offset, parts);
      std::string got;
      for (const auto& b : bufs) got.append(reinterpret_cast<const char*>(b.data()), b.size());
      EXPECT_TRUE(got == want) << "offset " << offset;
    } else {
      ++past_end;
      short_prefix += offset + bufs[0].size() <= contents.size();
      EXPECT_THAT([&] { in->ReadGathered(offset, parts); },
                  ThrowsError(ErrorKind::kCorruption, error));
    }
  }
  EXPECT_GE(past_end, 40);
  EXPECT_GE(short_prefix, 20);
}

TEST(PosixEnvTest, ErrorsNameThePath) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string missing = JoinPath(tmp.path(), "missing");
  const std::string nested = JoinPath(missing, "f");
  EXPECT_THAT([&] { env->NewRandomAccessFile(missing); },
              ThrowsError(ErrorKind::kIo, "open " + missing + ": No such file or directory"));
  EXPECT_THAT([&] { env->NewWritableFile(nested); }, ThrowsError(ErrorKind::kIo, nested));
  EXPECT_THAT([&] { env->FileSize(missing); }, ThrowsError(ErrorKind::kIo, missing));
  EXPECT_THAT([&] { env->ListDir(missing); }, ThrowsError(ErrorKind::kIo, missing));
  EXPECT_THAT([&] { env->RemoveFile(missing); }, ThrowsError(ErrorKind::kIo, missing));
  EXPECT_THAT([&] { env->RenameFile(missing, nested); }, ThrowsError(ErrorKind::kIo, missing));
  EXPECT_THAT([&] { env->SyncDir(missing); }, ThrowsError(ErrorKind::kIo, missing));
  EXPECT_THAT([&] { env->NewRandomAccessFile(tmp.path()); },
              ThrowsError(ErrorKind::kIo, tmp.path()));
  EXPECT_FALSE(env->FileExists(missing));
  EXPECT_FALSE(env->IsDirectory(missing));
}

// Issue 15 defects 3 and 8: a FIFO made open() block forever, and a data
// file that is a symbolic link was followed anywhere.
TEST(PosixEnvTest, RefusesFifosWithoutBlocking) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string fifo = JoinPath(tmp.path(), "__0_0.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // Should the open block (the defect), a writer arriving after 2 s unblocks
  // it so that the test fails instead of hanging.
  std::atomic<bool> opened{false};
  std::thread unblock([&] {
    for (int i = 0; i < 200 && !opened; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!opened) {
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  });
  EXPECT_THAT([&] { env->NewRandomAccessFile(fifo); },
              ThrowsError(ErrorKind::kCorruption, fifo + " is not a regular file (a FIFO)"));
  opened = true;
  unblock.join();
  EXPECT_THAT([&] { ReadFileToString(env, fifo); }, ThrowsError(ErrorKind::kCorruption, fifo));
}

TEST(PosixEnvTest, RefusesSymbolicLinks) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string target = JoinPath(tmp.path(), "secret");
  WriteFile(env, target, "secret");
  const std::string link = JoinPath(tmp.path(), "__0_0.bin");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THAT([&] { env->NewRandomAccessFile(link); },
              ThrowsError(ErrorKind::kCorruption, link + " is a symbolic link"));
  const std::string dangling = JoinPath(tmp.path(), "metadata.json");
  ASSERT_EQ(::symlink("/nonexistent/x", dangling.c_str()), 0);
  EXPECT_THAT([&] { env->NewRandomAccessFile(dangling); },
              ThrowsError(ErrorKind::kCorruption, dangling + " is a symbolic link"));
  // A directory on the way may be a link (a checkpoint reached through one).
  const std::string dir_link = JoinPath(tmp.path(), "via");
  ASSERT_EQ(::symlink(tmp.path().c_str(), dir_link.c_str()), 0);
  EXPECT_EQ(ReadFileToString(env, JoinPath(dir_link, "secret")), "secret");
}

TEST(PosixEnvTest, DirectoryOperations) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string deep = JoinPath(tmp.path(), "a/b/c");
  env->CreateDirs(deep);
  env->CreateDirs(deep);  // existing is fine
  EXPECT_TRUE(env->IsDirectory(deep));
  WriteFile(env, JoinPath(deep, "z"), "1");
  WriteFile(env, JoinPath(deep, "y"), "2");
  env->CreateDirs(JoinPath(deep, "x"));
  EXPECT_EQ(env->ListDir(deep), (std::vector<std::string>{"x", "y", "z"}));
  env->SyncDir(deep);

  env->RenameFile(JoinPath(deep, "z"), JoinPath(deep, "w"));
  EXPECT_EQ(env->ListDir(deep), (std::vector<std::string>{"w", "x", "y"}));
  env->RemoveFile(JoinPath(deep, "w"));
  EXPECT_EQ(env->ListDir(deep), (std::vector<std::string>{"x", "y"}));

  const std::string top = JoinPath(tmp.path(), "a");
  env->RemoveAll(top);
  EXPECT_FALSE(env->FileExists(top));
  env->RemoveAll(top);  // missing is fine
}

TEST(WriteFileAtomicTest, CreatesAndReplaces) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string path = JoinPath(tmp.path(), "meta.json");
  WriteFileAtomic(env, path, std::string("first"));
  EXPECT_EQ(ReadFileToString(env, path), "first");
  WriteFileAtomic(env, path, std::string("second, longer"));
  EXPECT_EQ(ReadFileToString(env, path), "second, longer");
  EXPECT_EQ(env->ListDir(tmp.path()), std::vector<std::string>{"meta.json"});
}

class WriteFileAtomicFailureTest : public testing::TestWithParam<int> {};

// Whatever step fails, the old file stays intact and no temp file is left.
TEST_P(WriteFileAtomicFailureTest, KeepsOldFile) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string path = JoinPath(tmp.path(), "meta.json");
  WriteFileAtomic(&env, path, std::string("old contents"));
  switch (GetParam()) {
    case 0:
      env.FailWritesAfter(3);
      break;
    case 1:
      env.FailSyncs(true);
      break;
    case 2:
      env.FailRenames(true);
      break;
    case 3:
      env.FailPathsContaining(".tmp");
      break;
  }
  EXPECT_THAT([&] { WriteFileAtomic(&env, path, std::string("new contents")); },
              ThrowsError(ErrorKind::kIo, ".tmp"));
  EXPECT_EQ(ReadFileToString(Env::Default(), path), "old contents");
  EXPECT_EQ(Env::Default()->ListDir(tmp.path()), std::vector<std::string>{"meta.json"});
}

INSTANTIATE_TEST_SUITE_P(EveryStep, WriteFileAtomicFailureTest, testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace distckpt
