// MemoryEnv's POSIX semantics, Env capabilities refused by name, EnvForPath.
#include "io/memory_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/file_lock.h"
#include "io/forwarding_env.h"
#include "io/storage_path.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(MemoryEnvTest, FilesDirectoriesAndListing) {
  MemoryEnv env;
  EXPECT_THAT([&] { env.NewWritableFile("/a/f"); }, ThrowsError(ErrorKind::kIo, "open /a/f"));
  env.CreateDirs("/a/b/c/");
  EXPECT_TRUE(env.IsDirectory("/a/b"));
  EXPECT_TRUE(env.IsDirectory("/a/b/c/"));
  auto f = env.NewWritableFile("/a/f");
  f->Append(Bytes("hello world"));
  f->WriteAt(0, Bytes("J"));
  EXPECT_THAT([&] { f->WriteAt(10, Bytes("xy")); }, ThrowsError(ErrorKind::kInvalidArgument));
  f->Sync();
  f->Close();
  EXPECT_EQ(ReadFileToString(&env, "/a/f"), "Jello world");
  EXPECT_EQ(env.FileSize("/a/f"), 11u);
  EXPECT_THAT(env.ListDir("/a"), ElementsAre("b", "f"));
  EXPECT_THAT(env.ListDir("/a/b"), ElementsAre("c"));
  EXPECT_THAT([&] { env.ListDir("/nope"); }, ThrowsError(ErrorKind::kIo, "/nope"));
  auto r = env.NewRandomAccessFile("/a/f");
  std::string got(5, '\0');
  r->Read(6, std::as_writable_bytes(std::span(got.data(), got.size())));
  EXPECT_EQ(got, "world");
  EXPECT_THAT([&] { r->Read(8, std::as_writable_bytes(std::span(got.data(), got.size()))); },
              ThrowsError(ErrorKind::kCorruption, "truncated file /a/f"));
  EXPECT_THAT([&] { env.NewRandomAccessFile("/a/b"); }, ThrowsError(ErrorKind::kIo, "/a/b"));
  env.RemoveAll("/a/b");
  EXPECT_FALSE(env.FileExists("/a/b/c"));
  EXPECT_THAT(env.ListDir("/a"), ElementsAre("f"));
  env.RemoveFile("/a/f");
  EXPECT_THAT([&] { env.RemoveFile("/a/f"); }, ThrowsError(ErrorKind::kIo, "remove /a/f"));
  EXPECT_EQ(env.bytes_stored(), 0u);
}

TEST(MemoryEnvTest, RenameReplacesAtomicallyAndMovesDirectories) {
  MemoryEnv env;
  env.CreateDirs("/r/d/sub");
  WriteFileAtomic(&env, "/r/t", std::string("one"));
  auto reader = env.NewRandomAccessFile("/r/t");  // keeps the bytes it opened
  WriteFileAtomic(&env, "/r/t", std::string("two!"));
  EXPECT_EQ(ReadFileToString(&env, "/r/t"), "two!");
  EXPECT_EQ(reader->size(), 3u);
  EXPECT_FALSE(env.FileExists("/r/t.tmp"));
  WriteFileAtomic(&env, "/r/d/sub/x", std::string("x"));
  env.RenameFile("/r/d", "/r/e");
  EXPECT_FALSE(env.IsDirectory("/r/d"));
  EXPECT_EQ(ReadFileToString(&env, "/r/e/sub/x"), "x");
  env.CreateDirs("/r/full/y");
  EXPECT_THAT([&] { env.RenameFile("/r/e", "/r/full"); }, ThrowsError(ErrorKind::kIo, "rename"));
  EXPECT_THAT([&] { env.RenameFile("/r/e", "/r/e/sub/z"); }, ThrowsError(ErrorKind::kIo));
}

TEST(MemoryEnvTest, LocksExcludeASecondHolderUntilReleased) {
  MemoryEnv env;
  env.CreateDirs("/root");
  EXPECT_EQ(env.LockHolder("/root/w.lock"), std::nullopt);
  {
    std::unique_ptr<FileLock> held = env.LockFile("/root/w.lock", "root is held");
    EXPECT_THAT([&] { env.LockFile("/root/w.lock", "root is held"); },
                ThrowsError(ErrorKind::kInvalidArgument, "root is held (this process"));
    EXPECT_TRUE(env.LockHolder("/root/w.lock").has_value());
  }
  EXPECT_EQ(env.LockHolder("/root/w.lock"), std::nullopt);
  EXPECT_NE(env.LockFile("/root/w.lock", "root is held"), nullptr);
}

// An object store's capabilities: what it cannot do atomically is refused by
// name before anything is written, never done another way.
class NoAtomicsEnv : public ForwardingEnv {
 public:
  using ForwardingEnv::ForwardingEnv;
  std::string_view name() const override { return "object-store"; }
  EnvCapabilities capabilities() const override { return {false, false, false}; }
  std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what) override {
    return Env::LockFile(path, what);  // the base: refuses without locks
  }
};

TEST(EnvCapabilitiesTest, MissingCapabilitiesAreRefusedByName) {
  MemoryEnv mem;
  NoAtomicsEnv store(&mem);
  mem.CreateDirs("/b");
  EXPECT_THAT([&] { WriteFileAtomic(&store, "/b/tracker", std::string("5")); },
              ThrowsError(ErrorKind::kUnsupported,
                          "object-store storage cannot replace /b/tracker atomically (it has no "
                          "atomic rename)"));
  EXPECT_EQ(mem.ListDir("/b").size(), 0u);  // nothing written, no temp file
  EXPECT_THAT([&] { store.LockFile("/b/l", "x"); },
              ThrowsError(ErrorKind::kUnsupported, "object-store storage cannot lock /b/l"));
  EXPECT_THAT([&] { RequireCapability(&store, EnvCapability::kWriteAt, "patch a header"); },
              ThrowsError(ErrorKind::kUnsupported, "cannot patch a header (it has no writes at"));
  RequireCapability(&mem, EnvCapability::kWriteAt, "patch a header");  // memory can
  RequireCapability(Env::Default(), EnvCapability::kAtomicRename, "rename");
  EXPECT_EQ(Env::Default()->name(), "posix");
  EXPECT_EQ(store.LockHolder("/b/l"), std::nullopt);
}

TEST(EnvForPathTest, PathsAndUris) {
  StoragePath p = EnvForPath("/ckpt/run");
  EXPECT_EQ(p.env, Env::Default());
  EXPECT_EQ(p.path, "/ckpt/run");
  EXPECT_EQ(EnvForPath("rel/dir").path, "rel/dir");
  EXPECT_EQ(EnvForPath("file:///ckpt/run").path, "/ckpt/run");
  EXPECT_EQ(EnvForPath("FILE://localhost/ckpt").path, "/ckpt");
  EXPECT_EQ(EnvForPath("file:///ckpt/run").env, Env::Default());
  EXPECT_EQ(EnvForPath("a:b/c").path, "a:b/c");  // no "://": a path
  EXPECT_THAT([&] { EnvForPath("file://otherhost/x"); },
              ThrowsError(ErrorKind::kInvalidArgument, "not host 'otherhost'"));
  // With libcurl: the S3 Env, the URI its path (or, without credentials,
  // an error naming the URI); without: refused by name.
  try {
    StoragePath s3 = EnvForPath("s3://bucket/prefix/run");
    EXPECT_EQ(s3.env->name(), "s3");
    EXPECT_EQ(s3.path, "s3://bucket/prefix/run");
    EXPECT_FALSE(s3.env->capabilities().atomic_rename);
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("s3://bucket/prefix/run: "));
    EXPECT_THAT(e.what(), ::testing::AnyOf(::testing::HasSubstr("S3 storage is not available"),
                                           ::testing::HasSubstr("no credentials")));
  }
  EXPECT_THAT([&] { EnvForPath("s3:///x"); },
              ThrowsError(ErrorKind::kInvalidArgument, "names a bucket"));
  EXPECT_THAT([&] { EnvForPath("hdfs://nn/x"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown storage scheme 'hdfs://'"));
  EXPECT_THAT([&] { EnvForPath(""); }, ThrowsError(ErrorKind::kInvalidArgument, "empty path"));
}

}  // namespace
}  // namespace distckpt
