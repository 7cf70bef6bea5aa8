// MetadataCache (ParsedTextCache<T>): the parsed, checked metadata of recently
// opened checkpoints, so that loading one checkpoint again (every rank of an
// in-process world, a job reloading, a benchmark) parses its metadata once.
//
// Contract: the caller reads the metadata file on every open and passes its
// text; an entry (keyed by the file's path) is served only when that text is
// byte for byte the text it was parsed from. A checkpoint replaced at the
// same path (an overwrite's swap, a resave, a manager reusing a step
// directory) or a metadata file changed in place (damaged, edited) is parsed
// again, with exactly the errors of an uncached parse; no file identity
// (inode, mtime) is trusted. Only metadata whose parse and checks succeeded
// is cached: a failure throws and caches nothing. Bounded: at most
// `max_entries` entries and `max_text_bytes` of text in all (a larger text
// is parsed, never cached); the least recently used entry goes first.
//
// Thread-safety: every method may be called concurrently. Parses run
// outside the lock (two threads missing at once both parse); the metadata
// handed out is immutable and shared.
#ifndef DISTCKPT_FORMAT_METADATA_CACHE_H_
#define DISTCKPT_FORMAT_METADATA_CACHE_H_

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "format/checkpoint_metadata.h"

namespace distckpt {

// The cache of one kind of parsed value T (CheckpointMetadata for native
// checkpoints' metadata.json, the DCP layout of a .metadata file).
template <typename T>
class ParsedTextCache {
 public:
  ParsedTextCache(size_t max_entries, size_t max_text_bytes)
      : max_entries_(max_entries), max_text_bytes_(max_text_bytes) {}

  // Parses and checks the text of one metadata file (throws on failure).
  using Parse = std::function<T(std::string_view text)>;

  // The value of `path`, whose current contents are `text`: the cached entry
  // if `path` was last parsed from exactly `text`, else parse(text).
  std::shared_ptr<const T> Get(const std::string& path, std::string text, const Parse& parse) {
    {
      std::lock_guard lock(mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->path != path) continue;
        if (it->text != text) break;  // replaced or changed: parse again
        entries_.splice(entries_.begin(), entries_, it);
        return it->value;
      }
      ++parses_;
    }
    auto value = std::make_shared<const T>(parse(text));
    if (text.size() > max_text_bytes_ || max_entries_ == 0) return value;
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->path == path) {
        text_bytes_ -= it->text.size();
        entries_.erase(it);
        break;
      }
    }
    text_bytes_ += text.size();
    entries_.push_front({path, std::move(text), value});
    while (entries_.size() > max_entries_ || text_bytes_ > max_text_bytes_) {
      text_bytes_ -= entries_.back().text.size();
      entries_.pop_back();
    }
    return value;
  }

  size_t entries() const {
    std::lock_guard lock(mu_);
    return entries_.size();
  }
  // Parses run by Get since construction (misses), for tests.
  size_t parses() const {
    std::lock_guard lock(mu_);
    return parses_;
  }

 private:
  struct Entry {
    std::string path;
    std::string text;
    std::shared_ptr<const T> value;
  };

  const size_t max_entries_;
  const size_t max_text_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  size_t text_bytes_ = 0;     // of entries_
  size_t parses_ = 0;
};

using MetadataCache = ParsedTextCache<CheckpointMetadata>;

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_METADATA_CACHE_H_
