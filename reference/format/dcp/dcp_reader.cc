#include "format/dcp/dcp_reader.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <list>
#include <set>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/little_endian.h"
#include "format/block_checksums.h"
#include "format/block_reads.h"
#include "format/dcp/dcp_writer.h"
#include "format/dcp/megatron_files.h"
#include "format/dcp/sidecar_index.h"
#include "format/format.h"

namespace distckpt {
namespace {

using Describe = std::function<std::string()>;

constexpr uint64_t kSmallItem = 4 << 10;     // read whole
constexpr uint64_t kPieceBytes = 256 << 10;  // read, then hash while in cache

// The bytes of one item larger than kSmallItem: a head (local headers,
// data.pkl) and a tail (zip directory, end records) of the given sizes, each
// read once on first use; other bytes read as asked.
class ItemSource {
 public:
  ItemSource(const RandomAccessFile& file, uint64_t base, uint64_t length, uint64_t head,
             uint64_t tail, ReadStats& stats)
      : file_(file),
        base_(base),
        length_(length),
        head_size_(std::min(head, length)),
        tail_size_(std::min(tail, length)),
        stats_(stats) {}

  void Read(uint64_t offset, std::span<std::byte> dst) {
    if (offset + dst.size() <= head_size_) return Copy(head_, 0, head_size_, offset, dst);
    if (offset >= length_ - tail_size_) {
      return Copy(tail_, length_ - tail_size_, tail_size_, offset, dst);
    }
    file_.Read(base_ + offset, dst);
    stats_.bytes_read += dst.size();
  }

 private:
  void Copy(std::vector<std::byte>& cache, uint64_t start, uint64_t size, uint64_t offset,
            std::span<std::byte> dst) {
    if (cache.empty()) {
      cache.resize(size);
      file_.Read(base_ + start, cache);
      stats_.bytes_read += size;
    }
    std::memcpy(dst.data(), cache.data() + (offset - start), dst.size());
  }

  const RandomAccessFile& file_;
  const uint64_t base_, length_, head_size_, tail_size_;
  ReadStats& stats_;
  std::vector<std::byte> head_, tail_;
};

std::string ChunkName(const StoredTensor& tensor, const StoredChunk& chunk) {
  std::string name = fmt::format("key '{}' chunk at global offset {}", tensor.key,
                                 ShapeToString(chunk.box.offset));
  if (chunk.flat) name += fmt::format(" (flat [{}, {}))", chunk.flat->start, chunk.flat->stop);
  return name;
}

// Total bytes of `runs`, checked sorted, disjoint and inside `length`.
uint64_t CheckedRunBytes(std::span<const ReadRun> runs, uint64_t length, const Describe& what) {
  uint64_t covered = 0, end = 0;
  for (const ReadRun& run : runs) {
    if (run.offset_in_chunk < end || run.offset_in_chunk > length ||
        run.length > length - run.offset_in_chunk) {
      Fail(ErrorKind::kInvalidArgument,
           "read runs for {} are unsorted, overlap or exceed its {} "
           "bytes (run at {}, {} bytes)",
           what(), length, run.offset_in_chunk, run.length);
    }
    end = run.offset_in_chunk + run.length;
    covered += run.length;
  }
  return covered;
}

void CheckCrc(uint32_t actual, uint32_t expected, const std::string& file, const Describe& what) {
  if (actual != expected) {
    Fail(ErrorKind::kCorruption,
         "CRC32 mismatch in {} for {}: the zip records {:08x}, the data "
         "hashes to {:08x}",
         file, what(), expected, actual);
  }
}

// A whole record's check: DcpRecordHasher's digest against the item
// index's `hash` (an index of version 2), else the record's zip CRC32
// (files torch or an older distckpt wrote, and kAlways, which checks what
// torch would).
class RecordCheck {
 public:
  RecordCheck(const DcpIndexEntry* index, uint32_t crc, VerifyPolicy policy)
      : crc_expected_(crc),
        expected_(index && policy != VerifyPolicy::kAlways ? index->hash : std::nullopt) {
    if (expected_) hasher_.emplace(index->binding);
  }
  void Update(std::span<const std::byte> piece) {
    if (hasher_) {
      hasher_->Update(piece);
    } else {
      crc_ = Crc32(piece, crc_);
    }
  }
  void Check(const std::string& file, const Describe& what) const {
    if (!hasher_) return CheckCrc(crc_, crc_expected_, file, what);
    const uint64_t actual = hasher_->Digest();
    if (actual != *expected_) {
      Fail(ErrorKind::kCorruption,
           "checksum mismatch in {} for {}: the item index records {:016x}, the data hashes to "
           "{:016x}",
           file, what(), *expected_, actual);
    }
  }

 private:
  uint32_t crc_ = 0;
  const uint32_t crc_expected_;
  const std::optional<uint64_t> expected_;
  std::optional<DcpRecordHasher> hasher_;
};

}  // namespace

namespace {

// The layout's metadata completed with `common` (and without the common
// state object when it held it), shared by the readers of one layout that
// read the same common state: a warm reload copies no tensor records.
std::shared_ptr<const CheckpointMetadata> CompletedMetadata(
    const std::shared_ptr<const DcpLayout>& layout, nlohmann::json common, bool from_object) {
  struct Entry {
    std::weak_ptr<const DcpLayout> layout;
    std::shared_ptr<const CheckpointMetadata> metadata;
  };
  static std::mutex mu;
  static std::list<Entry> recent;  // most recent first, at most kEntries
  constexpr size_t kEntries = 4;
  {
    std::lock_guard lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it) {
      if (it->layout.lock() == layout && it->metadata->common == common) {
        recent.splice(recent.begin(), recent, it);
        return it->metadata;
      }
    }
  }
  auto md = std::make_shared<CheckpointMetadata>(layout->metadata);
  if (from_object) {
    // The common dict is not one of the checkpoint's sharded objects:
    // dropped from `objects` (inspect would list it, diff compare it twice,
    // and a strict load would count it as unexpected).
    std::erase_if(md->objects, [](const auto& o) { return o.second.key == kCommonStateKey; });
  }
  if (auto it = common.find("content_metadata"); it != common.end() && it->is_object()) {
    md->content = *it;
  }
  md->common = std::move(common);
  std::lock_guard lock(mu);
  recent.push_front({layout, md});
  if (recent.size() > kEntries) recent.pop_back();
  return md;
}

}  // namespace

DcpReader::DcpReader(Env* env, std::string dir, std::shared_ptr<const DcpLayout> layout)
    : env_(env),
      dir_(std::move(dir)),
      layout_(std::move(layout)),
      files_(env_, dir_, kDcpMetadataFileName) {
  bool from_object = false;
  nlohmann::json common = ReadCommonState(from_object);
  metadata_ = CompletedMetadata(layout_, std::move(common), from_object);
  stats_.bytes_read = 0;  // opening is not part of any load's reads
}

ZipReader DcpReader::OpenItem(const std::string& file, uint64_t offset, uint64_t length,
                              const Describe& what, std::shared_ptr<const std::string>* whole,
                              bool read_whole) {
  auto item = layout_->items.find({file, offset});
  if (item != layout_->items.end() && !item->second.transforms.empty()) {
    Fail(ErrorKind::kUnsupported,
         "{} in {} was written with stream transforms [{}], which "
         "distckpt cannot decode",
         what(), JoinPath(dir_, file), fmt::join(item->second.transforms, ", "));
  }
  const RandomAccessFile& f = files_.Open(file, offset, length, what);
  // The offset and length come from .metadata, which has no checksum: a
  // damaged one sends the read to other bytes, so the message names both.
  std::string source =
      fmt::format("{} (item at bytes [{}, {}) as {} records, {})", f.path(), offset,
                  offset + length, JoinPath(dir_, kDcpMetadataFileName), what());
  if (length <= kSmallItem || read_whole) {  // headers and data in one read
    auto bytes = std::make_shared<std::string>(length, '\0');
    f.Read(offset, std::as_writable_bytes(std::span(bytes->data(), bytes->size())));
    stats_.bytes_read += length;
    if (whole) *whole = bytes;
    return ZipReader(
        [bytes](uint64_t at, std::span<std::byte> dst) {
          std::memcpy(dst.data(), bytes->data() + at, dst.size());
        },
        length, std::move(source));
  }
  Edges edges;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = edges_.find(file); it != edges_.end()) edges = it->second;
  }
  auto cache = std::make_shared<ItemSource>(f, offset, length, edges.head, edges.tail, stats_);
  return ZipReader([cache](uint64_t at, std::span<std::byte> dst) { cache->Read(at, dst); }, length,
                   std::move(source));
}

namespace {

// The parsed item index tables that live readers hold, by SharedIndexKey
// (the trailer in it holds the table's xxHash3): the readers of one load's
// ranks, open at once, read a file's table once. An entry lives while a
// reader holds it; a later load reads the table again.
class IndexTables {
 public:
  using FileIndex = DcpFileIndex;
  std::shared_ptr<FileIndex> Find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = tables_.find(key);
    return it == tables_.end() ? nullptr : it->second.lock();
  }
  void Put(const std::string& key, const std::shared_ptr<FileIndex>& index) {
    std::lock_guard lock(mu_);
    std::erase_if(tables_, [](const auto& t) { return t.second.expired(); });
    tables_[key] = index;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<FileIndex>> tables_;  // guarded by mu_
};

IndexTables& SharedIndexes() {
  static IndexTables tables;
  return tables;
}

// The key of a file's table in IndexTables: its path, size, modification
// time and index trailer; empty (not shared) where the file is not a local
// one (another Env) or has no modification time: a file rewritten since
// (damaged, resaved) is read again.
std::string SharedIndexKey(Env* env, const RandomAccessFile& file,
                           std::span<const std::byte> trailer) {
  if (env->name() != "posix") return "";
  std::error_code error;
  const auto mtime = std::filesystem::last_write_time(file.path(), error);
  if (error) return "";
  std::string key =
      fmt::format("{}|{}|{}|", file.path(), file.size(), mtime.time_since_epoch().count());
  key.append(reinterpret_cast<const char*>(trailer.data()), trailer.size());
  return key;
}

}  // namespace

bool DcpReader::FollowsTrailer(const std::string& file, const DcpIndexTrailer& trailer) const {
  const auto first = layout_->items.lower_bound({file, 0});
  const auto end = layout_->items.lower_bound({file + '\0', 0});
  return trailer.count <= static_cast<uint64_t>(std::distance(first, end));
}

void DcpReader::ReadIndexBytes(const std::string& file, const RandomAccessFile& f, uint64_t offset,
                               std::span<std::byte> dst) {
  if (FromReceived(file, offset, dst)) return;  // read and counted by the rank that sent it
  if (Sidecar* sidecar = AnySidecar(file)) return ReadSidecar(*sidecar, f, offset, dst);
  f.Read(offset, dst);
  stats_.bytes_read += dst.size();
}

bool DcpReader::FromReceived(const std::string& file, uint64_t offset, std::span<std::byte> dst) {
  std::lock_guard<std::mutex> lock(mu_);
  auto pieces = received_.find(file);
  if (pieces == received_.end()) return false;
  auto it = pieces->second.upper_bound(offset);
  if (it == pieces->second.begin()) return false;
  --it;
  const std::string& piece = it->second;
  if (offset - it->first > piece.size() || dst.size() > piece.size() - (offset - it->first))
    return false;
  std::memcpy(dst.data(), piece.data() + (offset - it->first), dst.size());
  return true;
}

DcpReader::Sidecar* DcpReader::AnySidecar(const std::string& file) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sidecars_.find(file);
  return it == sidecars_.end() ? nullptr : it->second.get();
}

void DcpReader::ReadSidecar(Sidecar& sidecar, const RandomAccessFile& f, uint64_t offset,
                            std::span<std::byte> dst) {
  if (offset < sidecar.base) {
    Fail(ErrorKind::kCorruption, "{}: an item index offset {} lies before the end of {} ({})",
         sidecar.file->path(), offset, f.path(), sidecar.base);
  }
  sidecar.file->Read(offset - sidecar.base, dst);
  stats_.bytes_read += dst.size();
}

DcpIndexRead DcpReader::IndexRead(const std::string& file, const RandomAccessFile& f) {
  return [this, &file, &f](uint64_t offset, std::span<std::byte> dst) {
    ReadIndexBytes(file, f, offset, dst);
  };
}

std::shared_ptr<DcpReader::FileIndex> DcpReader::FileIndexOf(const std::string& file,
                                                             const Describe& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = indexes_.find(file); it != indexes_.end()) return it->second;
  }
  std::shared_ptr<FileIndex> loaded;
  const RandomAccessFile& f = files_.Open(file, 0, 0, what);
  bool own = false;  // the file ends with an index trailer
  if (layout_->metadata.writer.starts_with("distckpt") && f.size() >= kDcpIndexTrailerBytes) {
    std::vector<std::byte> last(kDcpIndexTrailerBytes);
    ReadIndexBytes(file, f, f.size() - last.size(), last);
    const std::string source = fmt::format("{} (its item index)", f.path());
    std::optional<DcpIndexTrailer> trailer = ParseDcpIndexTrailer(last, f.size(), source);
    own = trailer.has_value();
    if (trailer && FollowsTrailer(file, *trailer)) {
      // An index another live reader opened (IndexTables) is not read
      // again, nor are the groups of it that reader read (version 4).
      const std::string key = SharedIndexKey(env_, f, last);
      loaded = key.empty() ? nullptr : SharedIndexes().Find(key);
      if (!loaded) {
        loaded = std::make_shared<FileIndex>(*trailer, f.size(), source, IndexRead(file, f));
        if (!key.empty()) SharedIndexes().Put(key, loaded);
      }
    }
  }
  // A file without an index of its own (torch wrote it): its sidecar, if any.
  if (!own) loaded = SidecarIndexOf(file, f);
  std::lock_guard<std::mutex> lock(mu_);
  return indexes_.emplace(file, std::move(loaded)).first->second;
}

DcpReader::Sidecar* DcpReader::SidecarOf(const std::string& file) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sidecars_.find(file);
  return it == sidecars_.end() || it->second->bad ? nullptr : it->second.get();
}

void DcpReader::WarnSidecar(const std::string& key, const std::string& why) {
  // Once a process: the ranks of a load (threads) each open a reader.
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(key).second) return;
  }
  std::cerr << fmt::format(
      "warning: {}; not used: the records it would have verified in part are read whole and "
      "checked against their zip CRC32\n",
      why);
}

std::shared_ptr<DcpReader::FileIndex> DcpReader::SidecarIndexOf(const std::string& file,
                                                                const RandomAccessFile& f) {
  std::vector<std::string> candidates{DcpSidecarBeside(f.path())};
  const std::string cache = env_->name() == "posix" ? DcpIndexCacheDir() : "";
  if (!cache.empty()) candidates.push_back(DcpSidecarCached(cache, f.path(), f.size()));
  for (const std::string& path : candidates) {
    std::unique_ptr<RandomAccessFile> s;
    try {
      if (!env_->FileExists(path)) continue;
      s = env_->NewRandomAccessFile(path);
    } catch (const std::exception&) {
      continue;
    }
    const std::string source = fmt::format("{} (the item index of {})", path, f.path());
    try {
      if (s->size() < kDcpIndexTrailerBytes) {
        Fail(ErrorKind::kCorruption, "{}: {} bytes, too short for an item index", source,
             s->size());
      }
      const uint64_t base = f.size();
      std::map<uint64_t, std::string> head;  // what it reads: PrepareReads sends it
      const auto read = [&](uint64_t at, std::span<std::byte> dst) {
        if (FromReceived(file, at, dst)) return;
        if (at < base) {
          Fail(ErrorKind::kCorruption, "{}: an offset {} lies before the data file's end {}",
               source, at, base);
        }
        s->Read(at - base, dst);
        stats_.bytes_read += dst.size();
        head[at].assign(reinterpret_cast<const char*>(dst.data()), dst.size());
      };
      std::vector<std::byte> last(kDcpIndexTrailerBytes);
      read(base + s->size() - last.size(), last);
      const std::optional<DcpIndexTrailer> trailer =
          ParseDcpIndexTrailer(last, base + s->size(), source);
      if (!trailer) Fail(ErrorKind::kCorruption, "{}: no item index trailer", source);
      if (trailer->items_end != base) {
        Fail(ErrorKind::kCorruption,
             "{}: indexes a data file of {} bytes; it has {} (changed since `distckpt index`)",
             source, trailer->items_end, base);
      }
      if (!FollowsTrailer(file, *trailer)) {
        Fail(ErrorKind::kCorruption, "{}: lists {} items, more than .metadata has in the file",
             source, trailer->count);
      }
      // A sidecar another live reader opened (a load's ranks under threads)
      // is not read again, nor are the groups it read.
      std::string key = SharedIndexKey(env_, *s, last);
      if (!key.empty()) key = fmt::format("{}|{}|{}", f.path(), base, key);
      std::shared_ptr<FileIndex> index = key.empty() ? nullptr : SharedIndexes().Find(key);
      if (!index) {
        index = std::make_shared<FileIndex>(*trailer, base + s->size(), source, read);
        if (!key.empty()) SharedIndexes().Put(key, index);
      }
      std::lock_guard<std::mutex> lock(mu_);
      std::unique_ptr<Sidecar>& slot = sidecars_[file];
      if (!slot)
        slot = std::make_unique<Sidecar>(Sidecar{std::move(s), base, false, std::move(head)});
      return index;
    } catch (const std::exception& e) {
      WarnSidecar(path, e.what());
    }
  }
  // None in the cache under the file's size, but one under another size
  // (its size record): the file changed since `distckpt index`.
  if (!cache.empty() && !env_->FileExists(candidates.back())) {
    if (const std::optional<uint64_t> indexed = ReadDcpSidecarSize(env_, cache, f.path());
        indexed && *indexed != f.size()) {
      WarnSidecar(DcpSidecarSizeRecord(cache, f.path()),
                  fmt::format("{}: {} bytes, {} when `distckpt index` indexed it into {}: its "
                              "size changed since, so that item index no longer applies (rerun "
                              "`distckpt index`)",
                              f.path(), f.size(), *indexed, cache));
    }
  }
  return nullptr;
}

std::map<uint64_t, std::string> DcpReader::ReadIndexHead(const std::string& file) {
  std::map<uint64_t, std::string> pieces;
  try {
    const RandomAccessFile& f =
        files_.Open(file, 0, 0, [&] { return fmt::format("the item index of {}", file); });
    if (layout_->metadata.writer.starts_with("distckpt") && f.size() >= kDcpIndexTrailerBytes) {
      auto read = [&](uint64_t begin, uint64_t end) -> std::span<const std::byte> {
        std::string& piece = pieces[begin];
        piece.resize(end - begin);
        f.Read(begin, std::as_writable_bytes(std::span(piece.data(), piece.size())));
        stats_.bytes_read += piece.size();
        return std::as_bytes(std::span(piece.data(), piece.size()));
      };
      const std::span<const std::byte> last = read(f.size() - kDcpIndexTrailerBytes, f.size());
      const std::optional<DcpIndexTrailer> trailer = ParseDcpIndexTrailer(last, f.size(), f.path());
      if (trailer) {
        if (!FollowsTrailer(file, *trailer)) return pieces;
        const auto [begin, end] = DcpFileIndex::HeadBytes(*trailer, f.size());
        read(begin, end);
        return pieces;
      }
    }
    // No index of its own: its sidecar's trailer and directory, as this
    // reader read them (none when another reader of this process had).
    FileIndexOf(file, [&] { return fmt::format("the item index of {}", file); });
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sidecars_.find(file); it != sidecars_.end() && !it->second->bad) {
      pieces.insert(it->second->head.begin(), it->second->head.end());
    }
  } catch (const std::exception&) {
    // A reader that uses the file reads and fails alike, and says so.
  }
  return pieces;
}

namespace {

// PrepareReads' messages: little-endian u64s, strings as length and bytes.
void PutU64(std::string& out, uint64_t value) { AppendLittleEndian(out, value, 8); }
void PutBytes(std::string& out, std::string_view bytes) {
  PutU64(out, bytes.size());
  out += bytes;
}

// Reads a message PrepareReads built (every rank runs the same code): a
// short one fails kComm naming the sender.
class MessageReader {
 public:
  MessageReader(std::string_view in, int from_rank) : in_(in), from_rank_(from_rank) {}
  bool done() const { return in_.empty(); }
  uint64_t U64() {
    Need(8);
    const uint64_t value = LoadLittleEndian(in_.data(), 8);
    in_.remove_prefix(8);
    return value;
  }
  std::string_view Bytes() {
    const uint64_t size = U64();
    Need(size);
    std::string_view bytes = in_.substr(0, size);
    in_.remove_prefix(size);
    return bytes;
  }

 private:
  void Need(uint64_t bytes) const {
    if (in_.size() < bytes) {
      Fail(ErrorKind::kComm, "malformed item index message from rank {}: {} bytes short",
           from_rank_, bytes - in_.size());
    }
  }
  std::string_view in_;
  const int from_rank_;
};

}  // namespace

void DcpReader::PrepareReads(const ChunksFn& chunks, Communicator& comm) {
  // Every rank runs the same collectives (a checkpoint torch wrote too: the
  // sidecars of its files, sidecar_index.h, are shared alike, each rank
  // checking what it receives against its own sidecar's trailer). A load of
  // one rank takes this path too: its reader threads then find every piece
  // read (none reads a trailer or group another is reading: the same count
  // each run).
  std::map<std::string, std::vector<uint64_t>> mine;  // the items this rank reads, by file
  try {
    for (const StoredChunk* chunk : chunks()) {
      if (chunk->length > 0) mine[chunk->file].push_back(chunk->offset);
    }
  } catch (const std::exception&) {
    mine.clear();  // its reads report it
  }
  for (auto& [file, offsets] : mine) {
    std::sort(offsets.begin(), offsets.end());
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  }
  // Every file any rank reads, with an owner among its readers (spread).
  std::string out;
  for (const auto& [file, offsets] : mine) PutBytes(out, file);
  std::map<std::string, std::vector<int>> readers;
  const std::vector<std::string> names = comm.AllGather(out);
  for (int r = 0; r < static_cast<int>(names.size()); ++r) {
    for (MessageReader in(names[r], r); !in.done();) readers[std::string(in.Bytes())].push_back(r);
  }
  std::vector<const std::string*> files;
  std::vector<int> owners;
  for (const auto& [file, ranks] : readers) {
    owners.push_back(ranks[files.size() % ranks.size()]);
    files.push_back(&file);
  }
  // Each round: the owners' pieces, (file, offset, bytes) each, all-gathered
  // and kept by every rank (a fully parallel load may read another's items).
  const auto exchange = [&](const std::string& pieces) {
    const std::vector<std::string> all = comm.AllGather(pieces);
    std::lock_guard<std::mutex> lock(mu_);
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      for (MessageReader in(all[r], r); !in.done();) {
        const uint64_t k = in.U64();
        const uint64_t offset = in.U64();
        const std::string_view bytes = in.Bytes();
        if (k >= files.size())
          Fail(ErrorKind::kComm, "malformed item index message from rank {}", r);
        received_[*files[k]][offset] = std::string(bytes);
      }
    }
  };
  const auto index_of = [&](const std::string& file) -> std::shared_ptr<FileIndex> {
    try {
      return FileIndexOf(file, [&] { return fmt::format("the item index of {}", file); });
    } catch (const std::exception&) {
      return nullptr;  // the reads report it
    }
  };
  // Round 1: each file's trailer and directory (or table), read by its owner.
  out.clear();
  for (size_t k = 0; k < files.size(); ++k) {
    if (owners[k] != comm.rank()) continue;
    for (const auto& [offset, bytes] : ReadIndexHead(*files[k])) {
      PutU64(out, k);
      PutU64(out, offset);
      PutBytes(out, bytes);
    }
  }
  exchange(out);
  // Round 2 (version 4): the groups of the items each rank reads; each
  // group read once, by the owner, adjacent groups in one read.
  out.clear();
  for (size_t k = 0; k < files.size(); ++k) {
    auto it = mine.find(*files[k]);
    if (it == mine.end()) continue;
    const std::shared_ptr<FileIndex> index = index_of(*files[k]);
    if (!index) continue;
    const std::vector<uint64_t> groups = index->GroupsOf(it->second);
    if (groups.empty()) continue;
    PutU64(out, k);
    PutU64(out, groups.size());
    for (uint64_t g : groups) PutU64(out, g);
  }
  std::map<uint64_t, std::set<uint64_t>> wanted;  // groups by file
  const std::vector<std::string> asked = comm.AllGather(out);
  for (int r = 0; r < static_cast<int>(asked.size()); ++r) {
    for (MessageReader in(asked[r], r); !in.done();) {
      std::set<uint64_t>& groups = wanted[in.U64()];
      for (uint64_t n = in.U64(); n > 0; --n) groups.insert(in.U64());
    }
  }
  out.clear();
  for (const auto& [k, groups] : wanted) {
    if (k >= files.size() || owners[k] != comm.rank()) continue;
    const std::shared_ptr<FileIndex> index = index_of(*files[k]);
    if (!index) continue;
    try {
      const RandomAccessFile& f = files_.Open(*files[k], 0, 0, [&] { return *files[k]; });
      const std::vector<uint64_t> list(groups.begin(), groups.end());
      Sidecar* sidecar = SidecarOf(*files[k]);
      for (const auto& [begin, end] : index->GroupRuns(list)) {
        std::string bytes(end - begin, '\0');
        const std::span<std::byte> dst =
            std::as_writable_bytes(std::span(bytes.data(), bytes.size()));
        if (sidecar) {
          ReadSidecar(*sidecar, f, begin, dst);
        } else {
          f.Read(begin, dst);
          stats_.bytes_read += bytes.size();
        }
        PutU64(out, k);
        PutU64(out, begin);
        PutBytes(out, bytes);
      }
    } catch (const std::exception&) {
      // The reads of its items report it.
    }
  }
  exchange(out);
}

const DcpIndexEntry* DcpReader::IndexEntry(const std::string& file, uint64_t item_offset,
                                           const Describe& what) {
  const std::shared_ptr<FileIndex> index = FileIndexOf(file, what);
  if (!index) return nullptr;
  Sidecar* sidecar = SidecarOf(file);
  if (!sidecar) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sidecars_.count(file)) return nullptr;  // a sidecar found bad
    }
    return index->Find(item_offset, IndexRead(file, files_.Open(file, 0, 0, what)));
  }
  try {
    return index->Find(item_offset, IndexRead(file, files_.Open(file, 0, 0, what)));
  } catch (const CheckpointError& e) {
    WarnSidecar(sidecar->file->path(), e.what());
    std::lock_guard<std::mutex> lock(mu_);
    sidecar->bad = true;
    return nullptr;
  }
}

DcpReader::TensorItem DcpReader::ZipItem(const StoredTensor& tensor, const StoredChunk& chunk,
                                         const Describe& what) {
  auto length = layout_->items.find({chunk.file, chunk.offset});
  std::shared_ptr<const std::string> whole;
  ZipReader zip = OpenItem(chunk.file, chunk.offset, length->second.length, what, &whole);
  TensorItem item;
  item.tensor = ReadTensorRecord(zip);
  item.bytes = std::move(whole);
  const TorchTensor& t = item.tensor;
  const bool shape_ok = chunk.flat ? t.numel() == chunk.flat->size() : t.size == chunk.box.shape;
  if (t.dtype != tensor.dtype || !shape_ok) {
    Fail(ErrorKind::kCorruption,
         "{}: the item holds a {} tensor of size {}, .metadata expects {} "
         "{}",
         zip.source(), TorchDTypeName(t.dtype), ShapeToString(t.size), TorchDTypeName(tensor.dtype),
         chunk.flat ? fmt::format("with {} elements", chunk.flat->size())
                    : ShapeToString(chunk.box.shape));
  }
  const ZipReader::Entry& record = zip.Get("data/" + t.storage_key);
  if (record.method != 0 || record.size < t.storage_bytes) {
    Fail(ErrorKind::kCorruption,
         "{}: storage record data/{} is {} bytes (method {}), the tensor "
         "needs {} stored bytes",
         zip.source(), t.storage_key, record.size, record.method, t.storage_bytes);
  }
  item.record_offset = chunk.offset + zip.DataOffset(record);
  item.record_size = record.size;
  item.crc = record.crc;
  std::lock_guard<std::mutex> lock(mu_);
  // The next item of this file is read with the edges this one needed: the
  // head through the storage record's local header, the tail from the zip
  // directory on (a writer lays out every tensor item alike).
  edges_[chunk.file] = {record.header_offset + 30,
                        std::max<uint64_t>(zip.size() - zip.directory_offset(), 98)};
  return item;
}

std::string DcpReader::BuildItemIndex(const std::string& file, uint64_t* items) {
  const RandomAccessFile& f = files_.Open(file, 0, 0, [&] { return file; });
  std::map<uint64_t, std::pair<const StoredTensor*, const StoredChunk*>> chunks;  // by item
  for (const auto& [key, tensor] : metadata_->tensors) {
    for (const StoredChunk& chunk : tensor.chunks) {
      if (chunk.file == file && chunk.length > 0)
        chunks.emplace(chunk.offset, std::pair{&tensor, &chunk});
    }
  }
  DcpIndexWriter index;
  uint64_t count = 0;
  std::vector<std::byte> record;
  for (const auto& [offset, pair] : chunks) {
    const StoredTensor& tensor = *pair.first;
    const StoredChunk& chunk = *pair.second;
    const Describe what = [&] { return ChunkName(tensor, chunk); };
    // As a full verified load reads it: its zip headers and data.pkl
    // checked against .metadata, its record whole against its CRC32.
    const TensorItem item = ZipItem(tensor, chunk, what);
    record.resize(item.record_size);
    if (item.bytes) {
      std::memcpy(record.data(), item.bytes->data() + (item.record_offset - chunk.offset),
                  record.size());
    } else {
      files_.Open(file, item.record_offset, item.record_size, what);
      f.Read(item.record_offset, record);
      stats_.bytes_read += record.size();
    }
    const uint64_t binding = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
    std::vector<uint32_t> no_blocks;  // block_size 0: none
    const DcpRecordSums sums = DcpHashRecord(record, 0, binding, &no_blocks);
    CheckCrc(sums.crc, item.crc, f.path(), what);
    // An index entry describes a contiguous record of exactly the chunk's bytes.
    if (!item.tensor.IsContiguous() || item.tensor.storage_offset != 0 ||
        item.record_size != chunk.length) {
      continue;
    }
    const DcpRecordLayout layout = DcpLayoutOf(tensor, chunk, chunk.length);
    index.Add({.item_offset = chunk.offset,
               .data_offset = item.record_offset,
               .data_size = chunk.length,
               .binding = binding,
               .crcs_offset = 0,
               .hash = sums.hash,
               .crc = item.crc,
               .block_size = layout.block_size,
               .tiles = layout.tiles.tiles()},
              DcpTileCrcs(layout.tiles, record));
    ++count;
  }
  if (items) *items = count;
  return index.empty() ? std::string() : index.Finish(f.size());
}

namespace {

// Whole records read together (ReadChunks): up to 1 MiB a system call, with
// gaps of up to 4 KiB between records (a distckpt item's zip directory and
// the next item's headers: about 700 bytes) read into scratch, as the native
// reader gathers chunks (bench/README.md: a load of 256 records of 64 KiB
// took 256 calls, now about 64).
constexpr uint64_t kGatheredBytes = 1 << 20;
constexpr uint64_t kGatheredGap = 4 << 10;
constexpr size_t kGatheredRecords = 256;  // 511 parts: within IOV_MAX (1024)
// The gaps read with the records stay within 1/64 of their bytes (a 700-byte
// gap beside records of 64 KiB or more), so read/needed stays near 1 for
// the small records of real models (norms, biases: a few hundred bytes each).
constexpr uint64_t kGatheredGapShare = 64;

}  // namespace

const DcpReader::TensorItem* DcpReader::GatheredItem(const ChunkRead& read) {
  const StoredChunk& chunk = *read.chunk;
  if (chunk.length == 0 || chunk.length > kPieceBytes || read.runs.size() != 1 ||
      read.runs[0].offset_in_chunk != 0 || read.runs[0].length != chunk.length) {
    return nullptr;
  }
  const TensorItem* item;
  try {
    item = &Item(*read.tensor, chunk, [&] { return ChunkName(*read.tensor, chunk); });
  } catch (const CheckpointError&) {
    return nullptr;
  }
  const bool whole = !item->bytes && item->tensor.IsContiguous() &&
                     item->tensor.storage_offset == 0 && item->record_size == chunk.length;
  return whole ? item : nullptr;
}

// The same bytes, checks, messages and stats as ReadChunk of each in turn
// (but for the bytes read: the gaps between records count too).
void DcpReader::PrefetchIndexes(std::span<const ChunkRead> reads) {
  std::map<std::string, std::vector<uint64_t>> offsets;  // by file
  std::map<std::string, const ChunkRead*> firsts;
  for (const ChunkRead& read : reads) {
    if (read.runs.empty() || read.chunk->length == 0) continue;
    offsets[read.chunk->file].push_back(read.chunk->offset);
    firsts.emplace(read.chunk->file, &read);
  }
  for (auto& [file, items] : offsets) {
    const ChunkRead& first = *firsts.at(file);
    const Describe what = [&] { return ChunkName(*first.tensor, *first.chunk); };
    const std::shared_ptr<FileIndex> index = FileIndexOf(file, what);
    if (!index) continue;
    std::sort(items.begin(), items.end());
    Sidecar* sidecar = SidecarOf(file);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!sidecar && sidecars_.count(file)) continue;  // a sidecar found bad
    }
    if (!sidecar) {
      index->Prefetch(items, IndexRead(file, files_.Open(file, 0, 0, what)));
      continue;
    }
    try {
      index->Prefetch(items, IndexRead(file, files_.Open(file, 0, 0, what)));
    } catch (const CheckpointError& e) {
      WarnSidecar(sidecar->file->path(), e.what());
      std::lock_guard<std::mutex> lock(mu_);
      sidecar->bad = true;
    }
  }
}

void DcpReader::ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy) {
  // kAlways also checks every item's zip headers against its index: one at a time.
  if (policy == VerifyPolicy::kAlways) return CheckpointReader::ReadChunks(reads, policy);
  PrefetchIndexes(reads);
  std::vector<const TensorItem*> items;
  std::vector<std::span<std::byte>> parts;
  std::vector<std::byte> gaps;
  for (size_t i = 0; i < reads.size();) {
    const TensorItem* first = GatheredItem(reads[i]);
    if (!first) {
      ReadChunk(*reads[i].tensor, *reads[i].chunk, reads[i].runs, policy);
      ++i;
      continue;
    }
    const StoredChunk& chunk = *reads[i].chunk;
    const RandomAccessFile& file = files_.Open(chunk.file, first->record_offset, first->record_size,
                                               [&] { return ChunkName(*reads[i].tensor, chunk); });
    items.assign(1, first);
    uint64_t end = first->record_offset + first->record_size, gap_bytes = 0;
    size_t j = i + 1;
    for (; j < reads.size() && j - i < kGatheredRecords; ++j) {
      const TensorItem* next =
          reads[j].chunk->file == chunk.file ? GatheredItem(reads[j]) : nullptr;
      if (!next || next->record_offset < end || next->record_offset - end > kGatheredGap ||
          next->record_offset + next->record_size > file.size() ||
          next->record_offset + next->record_size - first->record_offset > kGatheredBytes) {
        break;
      }
      // The gaps (zip headers) are read, not needed: at most 1/kGatheredGapShare
      // of the records gathered, so small records are read one by one instead.
      const uint64_t gap = next->record_offset - end;
      const uint64_t payload = end - first->record_offset - gap_bytes + next->record_size;
      if ((gap_bytes + gap) * kGatheredGapShare > payload) break;
      gap_bytes += gap;
      end = next->record_offset + next->record_size;
      items.push_back(next);
    }
    gaps.resize(gap_bytes);
    parts.clear();
    uint64_t gap_at = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) {
        const uint64_t gap =
            items[k]->record_offset - (items[k - 1]->record_offset + items[k - 1]->record_size);
        if (gap > 0) parts.push_back(std::span(gaps).subspan(gap_at, gap));
        gap_at += gap;
      }
      parts.push_back(std::span(reads[i + k].runs[0].dst, items[k]->record_size));
    }
    file.ReadGathered(first->record_offset, parts);
    stats_.bytes_read += end - first->record_offset;
    for (size_t k = 0; k < items.size(); ++k) {
      if (policy == VerifyPolicy::kNever) {
        ++stats_.chunks_unverified;
        continue;
      }
      const ChunkRead& read = reads[i + k];
      RecordCheck check(items[k]->index, items[k]->crc, policy);
      check.Update(std::span<const std::byte>(read.runs[0].dst, items[k]->record_size));
      const Describe what = [&] { return ChunkName(*read.tensor, *read.chunk); };
      if (items[k]->sidecar) {
        try {
          check.Check(file.path(), what);
        } catch (const CheckpointError& error) {
          // As ReadChunk: the record's zip CRC32 tells a bad sidecar from bad data.
          ReadItem(WithoutSidecar(*read.tensor, *read.chunk, what, error.what()), *read.tensor,
                   *read.chunk, read.runs, policy, what, read.chunk->length);
          continue;
        }
      } else {
        check.Check(file.path(), what);
      }
      ++stats_.chunks_verified;
    }
    i = j;
  }
}

DcpReader::TensorItem DcpReader::IndexedItem(const StoredTensor& tensor, const StoredChunk& chunk,
                                             const DcpIndexEntry& e, uint64_t item_length,
                                             const Describe& what) const {
  // distckpt wrote the item: the index says where its contiguous storage
  // record lies and what it hashes to; no zip header is read.
  const uint64_t end = chunk.offset + item_length;
  if (e.binding != ChunkBindingSeed(tensor.key, tensor.dtype, chunk) ||
      e.data_size != chunk.length || e.data_offset > end || e.data_size > end - e.data_offset) {
    Fail(ErrorKind::kCorruption,
         "{}: the item index entry of the item at byte {} of {} is for another key, dtype or "
         "box, or lies outside the item's {} bytes (.metadata or the file is damaged)",
         what(), chunk.offset, JoinPath(dir_, chunk.file), item_length);
  }
  TensorItem item;
  item.tensor.dtype = tensor.dtype;
  item.tensor.size = {chunk.numel()};
  item.tensor.stride = {1};
  item.tensor.storage_bytes = e.data_size;
  item.record_offset = e.data_offset;
  item.record_size = e.data_size;
  item.crc = e.crc;
  item.index = &e;
  return item;
}

const DcpReader::TensorItem& DcpReader::Item(const StoredTensor& tensor, const StoredChunk& chunk,
                                             const Describe& what) {
  const DcpItemKey key{chunk.file, chunk.offset};
  const auto length = layout_->items.find(key);
  const bool listed = length != layout_->items.end();
  {
    // A load asks for each of its items from two or more threads at once:
    // the cached item, or the one that the file's index (once read)
    // describes, under one lock.
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = tensor_items_.find(key); it != tensor_items_.end()) return it->second;
  }
  if (!listed) Fail(ErrorKind::kCorruption, "{}: no storage entry in .metadata", what());
  const DcpIndexEntry* e = IndexEntry(chunk.file, chunk.offset, what);
  TensorItem item;
  if (Sidecar* sidecar = e ? SidecarOf(chunk.file) : nullptr) {
    try {
      item = IndexedItem(tensor, chunk, *e, length->second.length, what);
      item.sidecar = true;
    } catch (const CheckpointError& error) {
      WarnSidecar(sidecar->file->path(),
                  fmt::format("{}: {}", sidecar->file->path(), error.what()));
      item = ZipItem(tensor, chunk, what);
    }
  } else {
    item = e ? IndexedItem(tensor, chunk, *e, length->second.length, what)
             : ZipItem(tensor, chunk, what);
  }
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_items_.emplace(key, std::move(item)).first->second;
}

const std::vector<uint32_t>& DcpReader::BlockCrcs(const DcpIndexEntry& entry,
                                                  const std::string& name,
                                                  const RandomAccessFile& file) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = block_crcs_.find(&entry); it != block_crcs_.end()) return *it->second;
  }
  std::vector<std::byte> bytes(DcpBlockCount(entry) * 4);
  if (Sidecar* sidecar = SidecarOf(name)) {
    if (entry.crcs_offset < sidecar->base) {
      Fail(ErrorKind::kCorruption, "{}: block CRCs at {}, before the end of {} ({})",
           sidecar->file->path(), entry.crcs_offset, file.path(), sidecar->base);
    }
    sidecar->file->Read(entry.crcs_offset - sidecar->base, bytes);
  } else {
    file.Read(entry.crcs_offset, bytes);
  }
  stats_.checksum_bytes_read += bytes.size();  // not payload (ReadStats)
  auto crcs = std::make_unique<const std::vector<uint32_t>>(ParseDcpBlockCrcs(bytes));
  std::lock_guard<std::mutex> lock(mu_);
  return *block_crcs_.emplace(&entry, std::move(crcs)).first->second;
}

void DcpReader::CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) {
  // The record around the payload (a torch.save zip) is larger still.
  files_.Open(chunk.file, chunk.offset, chunk.length, [&] { return ChunkName(tensor, chunk); });
}

// One ReadChunk call: what its read paths share, and the paths, one each
// (ReadChunk says when each applies).
class DcpReader::RecordRead {
 public:
  DcpReader& reader;
  const StoredTensor& tensor;
  const StoredChunk& chunk;
  const std::span<const ReadRun> runs;
  const VerifyPolicy policy;
  const Describe& what;
  const TensorItem& item;
  const RandomAccessFile& file;
  const uint64_t start;  // the tensor's first byte in its storage record

  // kAlways on an indexed item: its zip headers and block CRC32s agree with the index.
  void CheckItemAgainstIndex();
  // Exactly the runs (a whole record, verified, or any runs unverified).
  void ReadRunsExactly();
  // The touched tiles (index version 3) or blocks of an indexed item, each checked.
  void ReadIndexedTiles(const BlockLayout& tiles);
  void ReadIndexedBlocks();
  // A partial read of a contiguous record without finer checksums: all of it, hashed.
  void ReadWholeRecordToVerify();
  // A strided tensor: the whole record, gathered into row-major order.
  void ReadStrided();

 private:
  // Bytes [offset, offset + dst.size()) of the storage record: from memory
  // for a small item (counted when it was read), else from the data file.
  void ReadRecord(uint64_t offset, std::span<std::byte> dst);
};

void DcpReader::ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                          std::span<const ReadRun> runs, VerifyPolicy policy) {
  const Describe what = [&] { return ChunkName(tensor, chunk); };
  const uint64_t covered = CheckedRunBytes(runs, chunk.length, what);
  if (covered == 0 && chunk.length > 0) return;
  const TensorItem& item = Item(tensor, chunk, what);
  if (!item.sidecar) return ReadItem(item, tensor, chunk, runs, policy, what, covered);
  // Through a sidecar. `verify --data` checks what torch would: the zip's.
  if (policy == VerifyPolicy::kAlways) {
    return ReadItem(WithoutSidecar(tensor, chunk, what, ""), tensor, chunk, runs, policy, what,
                    covered);
  }
  // A partial read is checked by the sidecar's tile CRCs: first, the record
  // must still be the one indexed (a whole read's hash checks all of it).
  if (covered != chunk.length && policy != VerifyPolicy::kNever &&
      !SidecarBound(item, chunk, what)) {
    return ReadItem(WithoutSidecar(tensor, chunk, what,
                                   fmt::format("the record of {} in {} is not the one it indexed "
                                               "(the file changed since `distckpt index`)",
                                               what(), chunk.file)),
                    tensor, chunk, runs, policy, what, covered);
  }
  try {
    ReadItem(item, tensor, chunk, runs, policy, what, covered);
  } catch (const CheckpointError& error) {
    if (error.kind() != ErrorKind::kCorruption) throw;
    // The sidecar's checksum disagrees with the data: a damaged or stale
    // sidecar, or damaged data, which the record's zip CRC32 tells apart.
    ReadItem(WithoutSidecar(tensor, chunk, what, error.what()), tensor, chunk, runs, policy, what,
             covered);
  }
}

const DcpReader::TensorItem& DcpReader::WithoutSidecar(const StoredTensor& tensor,
                                                       const StoredChunk& chunk,
                                                       const Describe& what,
                                                       const std::string& why) {
  const DcpItemKey key{chunk.file, chunk.offset};
  if (!why.empty()) {
    std::string path = chunk.file;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = sidecars_.find(chunk.file); it != sidecars_.end())
        path = it->second->file->path();
    }
    WarnSidecar(path, fmt::format("{}: {}", path, why));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = zip_items_.find(key); it != zip_items_.end()) return it->second;
  }
  TensorItem item = ZipItem(tensor, chunk, what);
  std::lock_guard<std::mutex> lock(mu_);
  return zip_items_.emplace(key, std::move(item)).first->second;
}

bool DcpReader::SidecarBound(const TensorItem& item, const StoredChunk& chunk,
                             const Describe& what) {
  const DcpItemKey key{chunk.file, chunk.offset};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bound_.count(key)) return true;
  }
  const auto length = layout_->items.find(key);
  if (length == layout_->items.end()) return false;
  const RandomAccessFile& file = files_.Open(chunk.file, 0, 0, what);
  if (!DcpRecordBound(file, *item.index, chunk.offset, chunk.offset + length->second.length,
                      &stats_.bytes_read)) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  bound_.insert(key);
  return true;
}

void DcpReader::ReadItem(const TensorItem& item, const StoredTensor& tensor,
                         const StoredChunk& chunk, std::span<const ReadRun> runs,
                         VerifyPolicy policy, const Describe& what, uint64_t covered) {
  const RandomAccessFile& file =
      files_.Open(chunk.file, item.record_offset, item.record_size, what);
  const TorchTensor& t = item.tensor;
  const uint64_t start = static_cast<uint64_t>(t.storage_offset) * DTypeSize(t.dtype);
  RecordRead read{*this, tensor, chunk, runs, policy, what, item, file, start};
  if (item.index && policy == VerifyPolicy::kAlways) read.CheckItemAgainstIndex();
  // The runs tile the chunk, and the chunk is the whole record: its CRC applies.
  const bool whole =
      covered == chunk.length && t.IsContiguous() && start == 0 && item.record_size == chunk.length;
  if (t.IsContiguous() && (whole || policy == VerifyPolicy::kNever)) return read.ReadRunsExactly();
  // Index version 3: tiles laid along the reshard cuts (format/block_layout.h;
  // version 5: a flat record's too); a record whose box does not cut into
  // the recorded tiles is read whole.
  const BlockLayout tiles =
      item.index && item.index->tiles != 0
          ? BlockLayout::Tiles(
                tensor.global_shape, chunk.box, chunk.flat,
                item.index->flat_rows ? BlockLayout::Flat::kRows : BlockLayout::Flat::kUniform,
                DTypeSize(tensor.dtype), item.record_size, item.index->block_size)
          : BlockLayout();
  if (item.index && item.index->tiles != 0 && tiles.tiles() == item.index->tiles &&
      policy == VerifyPolicy::kWhenWhole && start == 0 && item.record_size == chunk.length) {
    return read.ReadIndexedTiles(tiles);
  }
  if (item.index && item.index->block_size > 0 && item.index->tiles == 0 &&
      policy == VerifyPolicy::kWhenWhole) {
    return read.ReadIndexedBlocks();
  }
  if (t.IsContiguous()) return read.ReadWholeRecordToVerify();
  read.ReadStrided();
}

void DcpReader::RecordRead::CheckItemAgainstIndex() {
  // Everything PyTorch would read too: the item's zip headers and data.pkl
  // must say what the index says (the record's CRC32 is checked below).
  const TensorItem zip = reader.ZipItem(tensor, chunk, what);
  if (zip.record_offset != item.record_offset || zip.record_size != item.record_size ||
      zip.crc != item.crc || !zip.tensor.IsContiguous() || zip.tensor.storage_offset != 0) {
    Fail(ErrorKind::kCorruption,
         "{}: {} disagrees with its item index (storage record of {} bytes at byte {}, CRC32 "
         "{:08x}; the index records {} bytes at byte {}, CRC32 {:08x})",
         file.path(), what(), zip.record_size, zip.record_offset, zip.crc, item.record_size,
         item.record_offset, item.crc);
  }
  // And the block CRC32s, which verify partial reads, must make up the record's.
  if (item.index->block_size > 0 && item.index->tiles == 0 &&
      CombineBlockCrcs(reader.BlockCrcs(*item.index, chunk.file, file), item.index->block_size,
                       item.record_size) != item.crc) {
    Fail(ErrorKind::kCorruption,
         "{}: the block CRC32s of {} in its item index do not combine to the record's CRC32 "
         "{:08x}",
         file.path(), what(), item.crc);
  }
}

void DcpReader::RecordRead::ReadRecord(uint64_t offset, std::span<std::byte> dst) {
  if (item.bytes) {
    std::memcpy(dst.data(), item.bytes->data() + (item.record_offset - chunk.offset) + offset,
                dst.size());
  } else {
    file.Read(item.record_offset + offset, dst);
    reader.stats_.bytes_read += dst.size();
  }
}

void DcpReader::RecordRead::ReadRunsExactly() {
  const bool verify = policy != VerifyPolicy::kNever;
  // Exactly the runs; a verified whole record in pieces, each hashed while
  // it is still in the cache.
  RecordCheck check(item.index, item.crc, policy);
  const uint64_t piece_bytes = verify ? kPieceBytes : ~uint64_t{0};
  for (size_t i = 0; i < runs.size();) {
    size_t j = i;  // merge runs adjacent both in the record and in memory
    uint64_t length = runs[i].length;
    while (j + 1 < runs.size() &&
           runs[j + 1].offset_in_chunk == runs[j].offset_in_chunk + runs[j].length &&
           runs[j + 1].dst == runs[j].dst + runs[j].length) {
      length += runs[++j].length;
    }
    for (uint64_t done = 0; done < length; done += piece_bytes) {
      std::span<std::byte> piece(runs[i].dst + done, std::min(piece_bytes, length - done));
      ReadRecord(start + runs[i].offset_in_chunk + done, piece);
      if (verify) check.Update(piece);
    }
    i = j + 1;
  }
  if (verify) {
    check.Check(file.path(), what);
    ++reader.stats_.chunks_verified;
  } else {
    ++reader.stats_.chunks_unverified;
  }
}

void DcpReader::RecordRead::ReadIndexedTiles(const BlockLayout& tiles) {
  const std::vector<uint32_t>& crcs = reader.BlockCrcs(*item.index, chunk.file, file);
  reader.stats_.bytes_read += ReadCheckedTiles(
      file, item.record_offset, tiles, runs, false,
      [&](std::span<const uint64_t> batch, const WindowBytes& at) {
        for (uint64_t b : batch) {
          uint32_t actual = 0;
          uint64_t from = item.record_size, to = 0;
          tiles.ForEachPart(b, [&](uint64_t offset, uint64_t bytes) {
            actual = Crc32(std::span(at(offset), bytes), actual);
            from = std::min(from, offset);
            to = std::max(to, offset + bytes);
          });
          if (actual != crcs[b]) {
            Fail(ErrorKind::kCorruption,
                 "CRC32 mismatch in {} for {}: block {} (bytes [{}, {}) of the record, file "
                 "offset {}): the item index records {:08x}, the data hashes to {:08x}",
                 file.path(), what(), b, from, to, item.record_offset + from, crcs[b], actual);
          }
        }
      });
  ++reader.stats_.chunks_verified;
}

void DcpReader::RecordRead::ReadIndexedBlocks() {
  // A partial read of an item distckpt wrote: the touched blocks of the
  // record, each checked against its CRC32 in the item index.
  const std::vector<uint32_t>& crcs = reader.BlockCrcs(*item.index, chunk.file, file);
  reader.stats_.bytes_read += ReadCheckedBlocks(
      file, item.record_offset, item.record_size, item.index->block_size, runs, false,
      [&](uint64_t first, std::span<const std::byte> bytes) {
        const uint64_t block_size = item.index->block_size;
        for (uint64_t at = 0, b = first; at < bytes.size(); at += block_size, ++b) {
          const std::span<const std::byte> block =
              bytes.subspan(at, std::min(block_size, bytes.size() - at));
          const uint32_t actual = Crc32(block);
          if (actual != crcs[b]) {
            const uint64_t from = b * block_size;
            Fail(ErrorKind::kCorruption,
                 "CRC32 mismatch in {} for {}: block {} (bytes [{}, {}) of the record, file "
                 "offset {}): the item index records {:08x}, the data hashes to {:08x}",
                 file.path(), what(), b, from, from + block.size(), item.record_offset + from,
                 crcs[b], actual);
          }
        }
      });
  ++reader.stats_.chunks_verified;
}

void DcpReader::RecordRead::ReadWholeRecordToVerify() {
  // A partial read to verify: torch's items carry one CRC32 for the whole
  // record and no finer checksum, so the whole record is read, in windows
  // hashed while in the cache (straight into the destination where one run
  // covers a window); the runs are copied out of the others. Returning
  // unverified bytes let a flipped data byte reach a resharded load as a
  // wrong value (issue 15).
  RecordCheck check(item.index, item.crc, policy);
  std::vector<std::byte> scratch;
  size_t r = 0;  // first run that may reach into the current window
  for (uint64_t from = 0; from < item.record_size; from += kPieceBytes) {
    const uint64_t to = std::min(item.record_size, from + kPieceBytes);
    // The window in chunk coordinates: [lo, hi), clipped to the chunk.
    const uint64_t lo = std::clamp(from, start, start + chunk.length) - start;
    const uint64_t hi = std::clamp(to, start, start + chunk.length) - start;
    while (r < runs.size() && runs[r].offset_in_chunk + runs[r].length <= lo) ++r;
    const bool direct = from >= start && to <= start + chunk.length && r < runs.size() &&
                        runs[r].offset_in_chunk <= lo &&
                        runs[r].offset_in_chunk + runs[r].length >= hi;
    std::span<std::byte> window;
    if (direct) {
      window = std::span(runs[r].dst + (lo - runs[r].offset_in_chunk), to - from);
    } else {
      scratch.resize(to - from);
      window = scratch;
    }
    ReadRecord(from, window);
    check.Update(window);
    if (direct) continue;
    for (size_t k = r; k < runs.size() && runs[k].offset_in_chunk < hi; ++k) {
      const uint64_t a = std::max(lo, runs[k].offset_in_chunk);
      const uint64_t b = std::min(hi, runs[k].offset_in_chunk + runs[k].length);
      if (a < b) {
        std::memcpy(runs[k].dst + (a - runs[k].offset_in_chunk), window.data() + (start + a - from),
                    b - a);
      }
    }
  }
  check.Check(file.path(), what);
  ++reader.stats_.chunks_verified;
}

void DcpReader::RecordRead::ReadStrided() {
  const TorchTensor& t = item.tensor;
  const bool verify = policy != VerifyPolicy::kNever;
  std::vector<std::byte> record(item.record_size);
  ReadRecord(0, record);
  if (verify) {
    RecordCheck check(item.index, item.crc, policy);
    check.Update(record);
    check.Check(file.path(), what);
    ++reader.stats_.chunks_verified;
  } else {
    ++reader.stats_.chunks_unverified;
  }
  std::vector<std::byte> rows(chunk.length);
  GatherRowMajor(t, record, rows.data());
  for (const ReadRun& run : runs)
    std::memcpy(run.dst, rows.data() + run.offset_in_chunk, run.length);
}

nlohmann::json DcpReader::ReadValue(const std::string& file, uint64_t offset, uint64_t length,
                                    const std::string& what) {
  ZipReader zip = OpenItem(file, offset, length, [&] { return what; });
  return TorchLoadJson(zip);
}

std::string DcpReader::ReadObject(const StoredObject& object) {
  return ReadObjectRecord(object)->value.dump();
}

std::shared_ptr<const ObjectRecord> DcpReader::ReadObjectRecord(const StoredObject& object) {
  std::shared_ptr<const std::string> bytes;
  ZipReader zip = OpenItem(
      object.file, object.offset, object.length,
      [&] { return fmt::format("object '{}'", object.unique_key); }, &bytes, true);
  // Copied byte for byte by a resave: every record is checked, not only those a load reads.
  for (const ZipReader::Entry& e : zip.entries()) zip.ReadRecord(e);
  nlohmann::json value = TorchLoadJson(zip);
  // Megatron stores the list [data of each local replica] under a unique key.
  if (value.is_array() && !value.empty()) value = std::move(value[0]);
  return std::make_shared<const ObjectRecord>(
      ObjectRecord{std::string(kTorchSaveEncoding), *bytes, std::move(value)});
}

nlohmann::json DcpReader::ReadCommonState(bool& from_object) {
  nlohmann::json common = nlohmann::json::object();
  const std::string path = JoinPath(dir_, kMegatronCommonFileName);
  if (env_->FileExists(path)) {
    std::unique_ptr<RandomAccessFile> f = env_->NewRandomAccessFile(path);
    ZipReader zip([&](uint64_t at, std::span<std::byte> dst) { f->Read(at, dst); }, f->size(),
                  path);
    common = TorchLoadJson(zip);
    if (!common.is_object()) {
      Fail(ErrorKind::kCorruption, "{}: holds a {}, not the common state dict", path,
           common.type_name());
    }
  } else {
    for (const auto& [unique_key, object] : layout_->metadata.objects) {
      if (object.key != kCommonStateKey) continue;
      common_record_ = ReadObjectRecord(object);
      common = common_record_->value;
      from_object = true;
    }
  }
  for (const DcpValueItem& v : layout_->values) {
    const std::string what = fmt::format("bytes item '{}'", fmt::join(v.path, "."));
    nlohmann::json* node = &common;
    for (size_t i = 0; node->is_object() && i + 1 < v.path.size(); ++i) {
      node = &(*node)[v.path[i]];
      if (node->is_null()) *node = nlohmann::json::object();
    }
    if (!node->is_object()) {
      Fail(ErrorKind::kCorruption, "{}: {} lies below a value that is not a dict",
           JoinPath(dir_, kDcpMetadataFileName), what);
    }
    (*node)[v.path.back()] = ReadValue(v.file, v.offset, v.length, what);
  }
  return common;
}

}  // namespace distckpt
