// S3Env against a real S3 server: the gateway of ci/s3-gateway, whose
// environment ci/with-s3-gateway passes (ctest label s3). Without
// AWS_ENDPOINT_URL and DISTCKPT_S3_BUCKET every test skips.
#include "io/s3_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "core/error.h"

namespace distckpt {
namespace {

class S3EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* endpoint = std::getenv("AWS_ENDPOINT_URL");
    const char* bucket = std::getenv("DISTCKPT_S3_BUCKET");
    if (!endpoint || !bucket) GTEST_SKIP() << "no S3 gateway (run under ci/with-s3-gateway)";
    config_ = S3ConfigFromEnvironment();
    config_.part_bytes = 5 << 20;  // the smallest S3 part: multipart from 5 MiB
    env_ = std::make_unique<S3Env>(config_);
    root_ = fmt::format("s3://{}/s3_env_test/{}-{}", bucket,
                        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                        std::random_device{}());
  }
  void TearDown() override {
    if (env_) env_->RemoveAll(root_);
  }

  static std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
    std::vector<std::byte> bytes(n);
    std::mt19937 gen(seed);
    for (std::byte& b : bytes) b = static_cast<std::byte>(gen());
    return bytes;
  }

  void Write(const std::string& path, std::span<const std::byte> bytes) {
    std::unique_ptr<WritableFile> f = env_->NewWritableFile(path);
    f->Append(bytes);
    f->Sync();
    f->Close();
  }

  S3Config config_;
  std::unique_ptr<S3Env> env_;
  std::string root_;
};

TEST_F(S3EnvTest, SmallFileRoundTripsAndRangesReadOnlyWhatIsAsked) {
  const std::string path = JoinPath(root_, "a/b.bin");
  std::vector<std::byte> bytes = Pattern(100000, 1);
  EXPECT_FALSE(env_->FileExists(path));
  Write(path, bytes);
  EXPECT_TRUE(env_->FileExists(path));
  EXPECT_EQ(env_->FileSize(path), bytes.size());
  std::unique_ptr<RandomAccessFile> f = env_->NewRandomAccessFile(path);
  ASSERT_EQ(f->size(), bytes.size());
  const uint64_t before = env_->counters().bytes_received;
  const uint64_t gets = env_->counters().get_requests;
  std::vector<std::byte> part(1000);
  f->Read(12345, part);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), bytes.begin() + 12345));
  EXPECT_EQ(env_->counters().bytes_received - before, 1000u);
  EXPECT_EQ(env_->counters().get_requests - gets, 1u);
  // Past the end: truncated, named.
  try {
    f->Read(bytes.size() - 10, part);
    FAIL() << "read past the end";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
    EXPECT_NE(std::string(e.what()).find("truncated file " + path), std::string::npos) << e.what();
  }
}

TEST_F(S3EnvTest, LargeFileIsAMultipartUploadAndAParallelRead) {
  const std::string path = JoinPath(root_, "big.bin");
  std::vector<std::byte> bytes = Pattern(23 << 20, 2);  // 5 parts, the last short
  const uint64_t requests = env_->counters().requests;
  {
    std::unique_ptr<WritableFile> f = env_->NewWritableFile(path);
    for (size_t at = 0; at < bytes.size(); at += 3 << 20) {
      f->Append(std::span(bytes).subspan(at, std::min<size_t>(3 << 20, bytes.size() - at)));
    }
    // Through an S3Env of its own: parts upload in the background, so the
    // writer's counters move while the probe runs.
    EXPECT_FALSE(S3Env(config_).FileExists(path)) << "an unclosed upload is visible";
    f->Close();
  }
  // start, 5 parts, complete; none retried
  EXPECT_EQ(env_->counters().retries, 0u);
  EXPECT_EQ(env_->counters().requests - requests, 7u);
  std::vector<std::byte> back(bytes.size());
  env_->NewRandomAccessFile(path)->Read(0, back);
  EXPECT_TRUE(back == bytes);
}

// WillRead: the hinted ranges fetched ahead in pieces (part_bytes / 2 at
// most, parallel at a time), each byte once; the reads get the same bytes as
// without the hint, and a read outside it asks for exactly its bytes.
TEST_F(S3EnvTest, HintedReadsFetchExactlyTheHintedBytesAhead) {
  const std::string path = JoinPath(root_, "hinted.bin");
  std::vector<std::byte> bytes = Pattern(12 << 20, 3);
  Write(path, bytes);
  std::unique_ptr<RandomAccessFile> f = env_->NewRandomAccessFile(path);
  const uint64_t before = env_->counters().bytes_received;
  const uint64_t gets = env_->counters().get_requests;
  // 5 MiB + 3 MiB, in pieces of the total / parallel, between 1 MiB and
  // part_bytes / 2 (parallel 4: 2 MiB, so 3 + 2 GETs).
  const std::pair<uint64_t, uint64_t> ranges[] = {{1000, 5 << 20}, {8 << 20, 3 << 20}};
  const uint64_t each = std::clamp<uint64_t>((8 << 20) / std::max(1, config_.parallel), 1 << 20,
                                             config_.part_bytes / 2);
  const uint64_t pieces = ((5 << 20) + each - 1) / each + ((3 << 20) + each - 1) / each;
  f->WillRead(ranges);
  std::vector<std::byte> piece(256 << 10);
  for (const auto& [offset, length] : ranges) {
    for (uint64_t at = 0; at < length; at += piece.size()) {
      const std::span<std::byte> dst(piece.data(), std::min<uint64_t>(piece.size(), length - at));
      f->Read(offset + at, dst);
      ASSERT_TRUE(std::equal(dst.begin(), dst.end(), bytes.begin() + offset + at))
          << "at " << offset + at;
    }
  }
  EXPECT_EQ(env_->counters().bytes_received - before, (5u << 20) + (3u << 20));
  EXPECT_EQ(env_->counters().get_requests - gets, pieces);
  // Outside any hint (the file hinted before): exactly the bytes asked for,
  // not a read-ahead window.
  std::vector<std::byte> small(4096);
  f->Read(6 << 20, small);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), bytes.begin() + (6 << 20)));
  f->Read((6 << 20) + 4096, small);
  EXPECT_EQ(env_->counters().bytes_received - before, (8u << 20) + 8192);
  EXPECT_EQ(env_->counters().get_requests - gets, pieces + 2);
  // A hint dropped half read (a new one replaces it) costs no wrong bytes.
  const std::pair<uint64_t, uint64_t> again[] = {{0, 4 << 20}};
  f->WillRead(again);
  f->Read(0, piece);
  f->WillRead({});
  f->Read(1 << 20, piece);
  EXPECT_TRUE(std::equal(piece.begin(), piece.end(), bytes.begin() + (1 << 20)));
}

// A small ranged GET on a reused connection: the gateway's Nagle held the
// body behind Linux's 40 ms delayed ACK until the client acknowledged the
// headers at once (s3_env.cc, AckNow).
TEST_F(S3EnvTest, SmallReadsOnAReusedConnectionAreNotDelayed) {
  const std::string path = JoinPath(root_, "small.bin");
  std::vector<std::byte> bytes = Pattern(64 << 10, 4);
  Write(path, bytes);
  std::unique_ptr<RandomAccessFile> f = env_->NewRandomAccessFile(path);
  std::vector<double> ms;
  std::vector<std::byte> part(100);
  for (int i = 0; i < 21; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f->Read(1000 * i + 7, part);  // not sequential: one GET each
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    ASSERT_TRUE(std::equal(part.begin(), part.end(), bytes.begin() + 1000 * i + 7));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("small ranged GETs on one connection: min %.1f ms, median %.1f ms, max %.1f ms\n",
              ms.front(), ms[10], ms.back());
  // A delayed ACK holds back every GET by about 40 ms; a busy machine (the
  // suite beside it) slows some, never all: the fastest one tells.
  EXPECT_LT(ms.front(), 30.0) << "a delayed ACK again (about 40 ms a GET)";
}

TEST_F(S3EnvTest, AnUnclosedWriterLeavesNothing) {
  const std::string small = JoinPath(root_, "small"), big = JoinPath(root_, "big");
  {
    std::unique_ptr<WritableFile> a = env_->NewWritableFile(small);
    a->Append(Pattern(10, 3));
    std::unique_ptr<WritableFile> b = env_->NewWritableFile(big);
    b->Append(Pattern(11 << 20, 4));  // two parts uploaded, then abandoned
  }
  EXPECT_FALSE(env_->FileExists(small));
  EXPECT_FALSE(env_->FileExists(big));
}

TEST_F(S3EnvTest, DirectoriesArePrefixes) {
  EXPECT_FALSE(env_->IsDirectory(root_));
  EXPECT_THROW(env_->ListDir(root_), CheckpointError);
  env_->CreateDirs(JoinPath(root_, "empty"));
  EXPECT_TRUE(env_->IsDirectory(JoinPath(root_, "empty")));
  EXPECT_EQ(env_->ListDir(JoinPath(root_, "empty")), std::vector<std::string>{});
  Write(JoinPath(root_, "x/1"), Pattern(1, 5));
  Write(JoinPath(root_, "x/2"), Pattern(2, 6));
  Write(JoinPath(root_, "y"), Pattern(3, 7));
  EXPECT_EQ(env_->ListDir(root_), (std::vector<std::string>{"empty", "x", "y"}));
  EXPECT_EQ(env_->ListDir(root_ + "/x/"), (std::vector<std::string>{"1", "2"}));
  EXPECT_TRUE(env_->IsDirectory(JoinPath(root_, "x")));
  EXPECT_FALSE(env_->IsDirectory(JoinPath(root_, "y")));
  env_->RemoveFile(JoinPath(root_, "y"));
  EXPECT_FALSE(env_->FileExists(JoinPath(root_, "y")));
  env_->RemoveAll(JoinPath(root_, "x"));
  EXPECT_FALSE(env_->IsDirectory(JoinPath(root_, "x")));
  EXPECT_EQ(env_->ListDir(root_), std::vector<std::string>{"empty"});
}

TEST_F(S3EnvTest, ListsPastOnePage) {
  for (int i = 0; i < 1005; i += 1) {
    // 1005 objects: two pages of ListObjectsV2
    Write(JoinPath(root_, fmt::format("many/{:04}", i)), {});
  }
  std::vector<std::string> names = env_->ListDir(JoinPath(root_, "many"));
  ASSERT_EQ(names.size(), 1005u);
  EXPECT_EQ(names.front(), "0000");
  EXPECT_EQ(names.back(), "1004");
}

TEST_F(S3EnvTest, CapabilitiesAreHonestAndRefusedByName) {
  const EnvCapabilities c = env_->capabilities();
  EXPECT_FALSE(c.atomic_rename);
  EXPECT_FALSE(c.write_at);
  EXPECT_FALSE(c.locks);
  EXPECT_TRUE(c.whole_file_writes);
  const std::string a = JoinPath(root_, "a");
  Write(a, Pattern(4, 8));
  try {
    env_->RenameFile(a, JoinPath(root_, "b"));
    FAIL() << "renamed";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("s3 storage cannot rename"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(env_->LockFile(JoinPath(root_, "lock"), "a save"), CheckpointError);
  std::unique_ptr<WritableFile> f = env_->NewWritableFile(a);
  f->Append(Pattern(4, 9));
  EXPECT_THROW(f->WriteAt(0, Pattern(1, 1)), CheckpointError);
  // WriteFileAtomic writes in place: one PUT replacing the object.
  WriteFileAtomic(env_.get(), a, std::string("new contents"));
  EXPECT_EQ(ReadFileToString(env_.get(), a), "new contents");
  EXPECT_EQ(env_->ListDir(root_), std::vector<std::string>{"a"});
}

TEST_F(S3EnvTest, MissingObjectsAreNamed) {
  const std::string path = JoinPath(root_, "nothing");
  try {
    env_->NewRandomAccessFile(path);
    FAIL() << "opened";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("open " + path + ": No such file"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(env_->FileSize(path), CheckpointError);
  S3Config other = config_;
  const std::string bucket = "no-such-bucket-distckpt";
  EXPECT_THROW(S3Env(other).NewRandomAccessFile("s3://" + bucket + "/x"), CheckpointError);
}

TEST_F(S3EnvTest, AnUnreachableEndpointIsRetriedThenNamed) {
  S3Config dead = config_;
  dead.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  dead.retries = 2;
  S3Env env(dead);
  const std::string path = JoinPath(root_, "x");
  try {
    env.FileSize(path);
    FAIL() << "answered";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("stat " + path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("after 3 attempts"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env.counters().requests, 3u);
  EXPECT_EQ(env.counters().retries, 2u);
}

TEST_F(S3EnvTest, WrongKeysAreRefusedByTheStore) {
  S3Config wrong = config_;
  wrong.secret_key = "not-the-secret";
  S3Env env(wrong);
  try {
    env.FileSize(JoinPath(root_, "x"));
    FAIL() << "answered";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 403"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace distckpt
