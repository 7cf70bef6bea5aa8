#include "format/metadata_cache.h"

namespace distckpt {

MetadataCache::MetadataCache(size_t max_entries, size_t max_text_bytes)
    : max_entries_(max_entries), max_text_bytes_(max_text_bytes) {}

std::shared_ptr<const CheckpointMetadata> MetadataCache::Get(const std::string& path,
                                                             std::string text, const Parse& parse) {
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->path != path) continue;
      if (it->text != text) break;  // replaced or changed: parse again
      entries_.splice(entries_.begin(), entries_, it);
      return it->metadata;
    }
    ++parses_;
  }
  auto metadata = std::make_shared<const CheckpointMetadata>(parse(text));
  if (text.size() > max_text_bytes_ || max_entries_ == 0) return metadata;
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->path == path) {
      text_bytes_ -= it->text.size();
      entries_.erase(it);
      break;
    }
  }
  text_bytes_ += text.size();
  entries_.push_front({path, std::move(text), metadata});
  while (entries_.size() > max_entries_ || text_bytes_ > max_text_bytes_) {
    text_bytes_ -= entries_.back().text.size();
    entries_.pop_back();
  }
  return metadata;
}

size_t MetadataCache::entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t MetadataCache::parses() const {
  std::lock_guard lock(mu_);
  return parses_;
}

}  // namespace distckpt
