#include "format/metadata_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace distckpt {
namespace {

// A parse that records its calls and names the metadata after the text.
class CountingParse {
 public:
  MetadataCache::Parse fn() {
    return [this](std::string_view text) {
      ++calls;
      if (text == "bad") throw std::runtime_error("bad metadata");
      CheckpointMetadata md;
      md.writer = std::string(text);
      return md;
    };
  }
  std::atomic<int> calls{0};
};

TEST(MetadataCacheTest, SameTextIsParsedOnce) {
  MetadataCache cache(4, 1 << 20);
  CountingParse parse;
  auto a = cache.Get("/c/metadata.json", "one", parse.fn());
  auto b = cache.Get("/c/metadata.json", "one", parse.fn());
  EXPECT_EQ(parse.calls, 1);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(b->writer, "one");
  EXPECT_EQ(cache.parses(), 1u);
}

TEST(MetadataCacheTest, ChangedTextAtThePathIsParsedAgain) {
  MetadataCache cache(4, 1 << 20);
  CountingParse parse;
  cache.Get("/c/metadata.json", "one", parse.fn());
  // Same length, one byte different (a damaged file, a resave): never stale.
  auto b = cache.Get("/c/metadata.json", "onf", parse.fn());
  EXPECT_EQ(parse.calls, 2);
  EXPECT_EQ(b->writer, "onf");
  EXPECT_EQ(cache.entries(), 1u);  // the new text replaced the old entry
  EXPECT_EQ(cache.Get("/c/metadata.json", "onf", parse.fn())->writer, "onf");
  EXPECT_EQ(parse.calls, 2);
}

TEST(MetadataCacheTest, TheSameTextAtAnotherPathIsItsOwnEntry) {
  MetadataCache cache(4, 1 << 20);
  CountingParse parse;
  cache.Get("/a/metadata.json", "one", parse.fn());
  cache.Get("/b/metadata.json", "one", parse.fn());
  EXPECT_EQ(parse.calls, 2);
  EXPECT_EQ(cache.entries(), 2u);
}

TEST(MetadataCacheTest, FailuresAreNotCached) {
  MetadataCache cache(4, 1 << 20);
  CountingParse parse;
  cache.Get("/c/metadata.json", "one", parse.fn());
  EXPECT_THROW(cache.Get("/c/metadata.json", "bad", parse.fn()), std::runtime_error);
  EXPECT_THROW(cache.Get("/c/metadata.json", "bad", parse.fn()), std::runtime_error);
  EXPECT_EQ(parse.calls, 3);
  // The last good text is still served.
  EXPECT_EQ(cache.Get("/c/metadata.json", "one", parse.fn())->writer, "one");
  EXPECT_EQ(parse.calls, 3);
}

TEST(MetadataCacheTest, LeastRecentlyUsedGoesFirst) {
  MetadataCache cache(2, 1 << 20);
  CountingParse parse;
  cache.Get("/a", "a", parse.fn());
  cache.Get("/b", "b", parse.fn());
  cache.Get("/a", "a", parse.fn());  // /a is now the most recent
  cache.Get("/c", "c", parse.fn());  // evicts /b
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(parse.calls, 3);
  cache.Get("/a", "a", parse.fn());
  EXPECT_EQ(parse.calls, 3);
  cache.Get("/b", "b", parse.fn());
  EXPECT_EQ(parse.calls, 4);
}

TEST(MetadataCacheTest, TextBytesAreBounded) {
  MetadataCache cache(8, 10);
  CountingParse parse;
  cache.Get("/big", std::string(11, 'x'), parse.fn());  // over the bound: never kept
  cache.Get("/big", std::string(11, 'x'), parse.fn());
  EXPECT_EQ(parse.calls, 2);
  EXPECT_EQ(cache.entries(), 0u);
  cache.Get("/a", std::string(6, 'a'), parse.fn());
  cache.Get("/b", std::string(6, 'b'), parse.fn());  // 12 bytes: /a goes
  EXPECT_EQ(cache.entries(), 1u);
  cache.Get("/b", std::string(6, 'b'), parse.fn());
  EXPECT_EQ(parse.calls, 4);
  cache.Get("/a", std::string(6, 'a'), parse.fn());
  EXPECT_EQ(parse.calls, 5);
}

TEST(MetadataCacheTest, ConcurrentGetsAgree) {
  MetadataCache cache(2, 1 << 20);
  CountingParse parse;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string text = std::to_string((t + i) % 3);
        if (cache.Get("/p" + text, text, parse.fn())->writer != text) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(cache.entries(), 2u);
  EXPECT_EQ(static_cast<int>(cache.parses()), parse.calls.load());
}

}  // namespace
}  // namespace distckpt
