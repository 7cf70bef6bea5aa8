#include "format/dcp/dcp_format.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <vector>

#include "core/error.h"
#include "format/dcp/dcp_layout.h"
#include "format/dcp/dcp_reader.h"
#include "format/dcp/dcp_writer.h"
#include "format/dcp/item_index.h"
#include "format/dcp/megatron_files.h"
#include "format/dcp/torch_save.h"
#include "format/metadata_cache.h"
#include "format/staged_overwrite.h"

namespace distckpt {
namespace {

// Every DCP open goes through it, as native opens through theirs: a few
// checkpoints' parsed .metadata, at most 8 MiB of it in all.
ParsedTextCache<DcpLayout>& ParsedLayouts() {
  static ParsedTextCache<DcpLayout> cache(4, 8 << 20);
  return cache;
}

// Where the items of data file `path` end: at distckpt's item index
// (item_index.h), or at the end of a file without one.
uint64_t ItemsEnd(Env* env, const std::string& path) {
  const uint64_t size = env->FileSize(path);
  if (size < kDcpIndexTrailerBytes) return size;
  std::vector<std::byte> last(kDcpIndexTrailerBytes);
  env->NewRandomAccessFile(path)->Read(size - last.size(), last);
  const std::optional<DcpIndexTrailer> trailer = ParseDcpIndexTrailer(last, size, path);
  return trailer ? trailer->items_end : size;
}

// Item lengths of a rank's data files: items are contiguous, so an item
// ends where the next one starts, or where its file's items end.
class ItemLengths {
 public:
  ItemLengths(Env* env, const std::string& dir, const CheckpointMetadata& md,
              const std::vector<DcpValueItem>& values = {}) {
    for (const DcpValueItem& v : values) starts_[v.file].push_back(v.offset);
    for (const auto& [key, t] : md.tensors) {
      for (const StoredChunk& c : t.chunks) starts_[c.file].push_back(c.offset);
    }
    for (const auto& [key, o] : md.objects) starts_[o.file].push_back(o.offset);
    for (auto& [file, starts] : starts_) {
      std::sort(starts.begin(), starts.end());
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      const std::string path = JoinPath(dir, file);
      if (!env->FileExists(path)) Fail(ErrorKind::kIncomplete, "data file {} is missing", path);
      sizes_[file] = ItemsEnd(env, path);
      if (starts.back() >= sizes_[file]) {
        Fail(ErrorKind::kCorruption, "data file {} ends at byte {}, before its item at {}", path,
             sizes_[file], starts.back());
      }
    }
  }

  uint64_t operator()(const std::string& file, uint64_t offset) const {
    const std::vector<uint64_t>& starts = starts_.at(file);
    auto next = std::upper_bound(starts.begin(), starts.end(), offset);
    return (next == starts.end() ? sizes_.at(file) : *next) - offset;
  }

 private:
  std::map<std::string, std::vector<uint64_t>> starts_;
  std::map<std::string, uint64_t> sizes_;
};

bool IsMegatronConfig(Env* env, const std::string& path) {
  return env->FileExists(path) && MegatronShardedBackend(ReadFileToString(env, path)).has_value();
}

// Committed iff .metadata exists (written last); an uncommitted save leaves
// data files, Megatron's files and temps. Every other file is the user's.
const StagedLayout& Layout() {
  static const StagedLayout layout{[](Env* env, const std::string& dir) {
                                     return env->FileExists(JoinPath(dir, kDcpMetadataFileName));
                                   },
                                   [](const std::string& name) {
                                     return IsDcpDataFileName(name) || name == ".metadata.tmp" ||
                                            name == kMegatronCommonFileName ||
                                            name == "common.pt.tmp" ||
                                            name == kMegatronConfigFileName ||
                                            name == "metadata.json.tmp";
                                   }};
  return layout;
}

// The common state as torch's DCP stores non-tensor values: dicts flattened
// as its planner does (flatten_state_dict: {"sched": {"lr": x}} is the item
// "sched.lr" with planner path [sched, lr], which Megatron's loader asks for),
// one bytes item (torch.save of the value) per leaf; a leaf is anything but a
// plain non-empty dict (lists, objects such as an argparse.Namespace, bytes,
// tensors, empty dicts). In a data file of rank 0 after its streams' files.
// Returns the items with their lengths.
std::vector<DcpValueItem> WriteCommonItems(Env* env, const std::string& dir,
                                           const CheckpointMetadata& md) {
  std::vector<DcpValueItem> values;
  if (!md.common.is_object() || md.common.empty()) return values;
  int stream = 0;  // the first stream of rank 0 no writer used
  auto note = [&](const std::string& file) {
    if (DcpFileRank(file) != 0) return;
    size_t at = file.rfind('_');
    if (at != std::string::npos) stream = std::max(stream, std::atoi(file.c_str() + at + 1) + 1);
  };
  for (const auto& [key, t] : md.tensors) {
    for (const StoredChunk& c : t.chunks) note(c.file);
  }
  for (const auto& [key, o] : md.objects) note(o.file);
  const std::string file = DcpDataFileName(0, stream);
  std::unique_ptr<WritableFile> out = env->NewWritableFile(JoinPath(dir, file));
  std::vector<std::string> path;
  std::function<void(const nlohmann::json&)> write = [&](const nlohmann::json& value) {
    const bool plain_dict = value.is_object() && !value.empty() &&
                            std::none_of(value.items().begin(), value.items().end(),
                                         [](const auto& kv) { return kv.key().starts_with("__"); });
    if (plain_dict && !path.empty()) {
      for (const auto& [key, child] : value.items()) {
        path.push_back(key);
        write(child);
        path.pop_back();
      }
      return;
    }
    const std::string item = TorchSaveJson(value);
    values.push_back({path, file, out->size(), item.size()});
    out->Append(std::as_bytes(std::span(item.data(), item.size())));
  };
  for (const auto& [key, value] : md.common.items()) {
    path = {key};
    write(value);
  }
  out->Sync();
  out->Close();
  return values;
}

class DcpFormatImpl : public Format {
 public:
  DcpFormatImpl(DcpTarget target, DcpLayoutKind kind, bool common_object, std::string_view name)
      : target_(target), kind_(kind), common_object_(common_object), name_(name) {}

  std::string_view name() const override { return name_; }
  bool CommonStateAsObject() const override { return common_object_; }
  std::string_view ObjectRecordEncoding() const override { return kTorchSaveEncoding; }

  bool Detect(Env* env, const std::string& dir) const override {
    return env->FileExists(JoinPath(dir, kDcpMetadataFileName));
  }

  // Overwrite goes through a staging directory swapped in at commit, as
  // native's (staged_overwrite.h): a DCP checkpoint names its files
  // relative to its directory, so it survives the rename.
  std::string PrepareDirectory(Env* env, const std::string& dir, bool overwrite) const override {
    const std::string config = JoinPath(dir, kMegatronConfigFileName);
    if (!Detect(env, dir) && env->FileExists(config) && !IsMegatronConfig(env, config)) {
      Fail(ErrorKind::kInvalidArgument,
           "{} holds a metadata.json of another format; refusing to "
           "write a DCP checkpoint over it",
           dir);
    }
    return PrepareStagedDirectory(env, dir, overwrite, Layout());
  }

  void RemoveUncommitted(Env* env, const std::string& dir,
                         const std::string& write_dir) const override {
    RemoveUncommittedSave(env, dir, write_dir, Layout());
  }

  std::unique_ptr<CheckpointWriter> NewWriter(Env* env, const std::string& write_dir,
                                              int rank) const override {
    return NewStreamWriter(env, write_dir, rank, 0);
  }

  std::unique_ptr<CheckpointWriter> NewStreamWriter(Env* env, const std::string& write_dir,
                                                    int rank, int stream) const override {
    return std::make_unique<DcpWriter>(env, write_dir, rank, stream, std::string(name()));
  }

  void Commit(Env* env, const std::string& dir, const std::string& write_dir,
              CheckpointMetadata metadata) const override {
    if (metadata.format != name()) {
      Fail(ErrorKind::kInvalidArgument, "cannot commit {} metadata as {}", metadata.format, name());
    }
    if (kind_ == DcpLayoutKind::kPlain) {
      // Plain DCP: the common state as bytes items, no Megatron files.
      const std::vector<DcpValueItem> values = WriteCommonItems(env, write_dir, metadata);
      const ItemLengths lengths(env, write_dir, metadata, values);
      DcpMetadata dcp = DcpFromMetadata(WithoutDuplicateEmptyChunks(std::move(metadata)), target_,
                                        lengths, values);
      WriteFileAtomic(env, JoinPath(write_dir, kDcpMetadataFileName), EncodeDcpMetadata(dcp));
      SwapInStaging(env, dir, write_dir);  // overwrite only
      return;
    }
    // Item extents from every item written, duplicates of empty chunks
    // included (each is an item in its rank's file), then one chunk per offset.
    const ItemLengths lengths(env, write_dir, metadata);
    // Megatron's files first, .metadata last: without it the directory is not a checkpoint.
    // The common state is in a data file already when the save wrote it as an object.
    const bool common_in_data =
        std::any_of(metadata.objects.begin(), metadata.objects.end(),
                    [](const auto& o) { return o.second.key == kCommonStateKey; });
    if (!common_in_data) {
      WriteFileAtomic(env, JoinPath(write_dir, kMegatronCommonFileName),
                      TorchSaveJson(metadata.common));
    }
    WriteFileAtomic(env, JoinPath(write_dir, kMegatronConfigFileName), TorchDistConfigText());
    const DcpMetadata dcp =
        DcpFromMetadata(WithoutDuplicateEmptyChunks(std::move(metadata)), target_, lengths);
    WriteFileAtomic(env, JoinPath(write_dir, kDcpMetadataFileName), EncodeDcpMetadata(dcp));
    SwapInStaging(env, dir, write_dir);  // overwrite only
  }

  std::unique_ptr<CheckpointReader> OpenReader(Env* env, const std::string& dir) const override {
    RequireCheckpointDirectory(env, dir, Layout());
    const std::string path = JoinPath(dir, kDcpMetadataFileName);
    if (!env->FileExists(path)) {
      Fail(ErrorKind::kIncomplete,
           "{} is not a DCP checkpoint (.metadata missing: save did not "
           "commit)",
           dir);
    }
    const std::string config = JoinPath(dir, kMegatronConfigFileName);
    if (env->FileExists(config)) {
      std::optional<std::string> backend = MegatronShardedBackend(ReadFileToString(env, config));
      if (backend && *backend != "torch_dist") {
        Fail(ErrorKind::kUnsupported,
             "{}: Megatron sharded backend '{}'; distckpt reads "
             "torch_dist (DCP) checkpoints",
             config, *backend);
      }
    }
    // .metadata parsed once per text (metadata_cache.h) and shared; the
    // reader completes its metadata with the common state.
    std::shared_ptr<const DcpLayout> layout =
        ParsedLayouts().Get(path, ReadFileToString(env, path), [&](std::string_view text) {
          DcpLayout parsed = LayoutFromDcp(DecodeDcpMetadata(text, path), path);
          CheckChunkTiling(parsed.metadata, path);
          return parsed;
        });
    // .metadata has no checksum: cross-check what can be. Every item must lie
    // inside its data file (a damaged offset or length is the metadata's
    // fault, reported as such, before any read).
    std::map<std::string, uint64_t> sizes;
    for (const auto& [key, item] : layout->items) {
      const auto& [file, offset] = key;
      auto size = sizes.find(file);
      if (size == sizes.end()) {
        const std::string data = JoinPath(dir, file);
        if (!env->FileExists(data)) continue;  // reported, naming the item, when read
        size = sizes.emplace(file, env->FileSize(data)).first;
      }
      if (offset > size->second || item.length > size->second - offset) {
        Fail(ErrorKind::kCorruption,
             "{}: holds {} bytes, but {} places an item at bytes [{}, {}) of it (the data file "
             "is truncated or the metadata is damaged)",
             JoinPath(dir, file), size->second, path, offset, offset + item.length);
      }
    }
    return std::make_unique<DcpReader>(env, dir, std::move(layout));
  }

 private:
  const DcpTarget target_;
  const DcpLayoutKind kind_;
  const bool common_object_;
  const std::string_view name_;
};

}  // namespace

const Format& DcpFormat(DcpTarget target) {
  static const DcpFormatImpl torch2(DcpTarget::kTorch2, DcpLayoutKind::kTorchDist, true, "dcp");
  static const DcpFormatImpl torch113(DcpTarget::kTorch113, DcpLayoutKind::kTorchDist, false,
                                      "dcp-1.13");
  return target == DcpTarget::kTorch113 ? torch113 : torch2;
}

const Format& DcpFormatWithCommonPt() {
  static const DcpFormatImpl format(DcpTarget::kTorch2, DcpLayoutKind::kTorchDist, false,
                                    "dcp-common-pt");
  return format;
}

const Format& FsdpDtensorFormat() {
  // torch's DCP keeps non-tensor values as bytes items, never as an object.
  static const DcpFormatImpl plain(DcpTarget::kTorch2, DcpLayoutKind::kPlain, false,
                                   "fsdp-dtensor");
  return plain;
}

}  // namespace distckpt
