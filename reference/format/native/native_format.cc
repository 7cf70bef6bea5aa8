// The native Format: data files written by NativeWriter, metadata.json
// (metadata_json.h) committed last, read by NativeReader. FORMAT.md has the
// byte layout and the crash windows of an overwrite.
#include "core/error.h"
#include "core/json_parse.h"
#include "format/chunk_layouts.h"
#include "format/format.h"
#include "format/metadata_cache.h"
#include "format/native/metadata_json.h"
#include "format/native/native_reader.h"
#include "format/native/native_writer.h"
#include "format/staged_overwrite.h"

namespace distckpt {
namespace {

constexpr char kTempMetadataFileName[] = "metadata.json.tmp";  // WriteFileAtomic's temp

// Committed iff metadata.json exists; an uncommitted save leaves data files
// and the metadata temp. Every other file is the user's.
const StagedLayout& Layout() {
  static const StagedLayout layout{[](Env* env, const std::string& dir) {
                                     return env->FileExists(JoinPath(dir, kMetadataFileName));
                                   },
                                   [](const std::string& name) {
                                     return IsDataFileName(name) || name == kTempMetadataFileName;
                                   }};
  return layout;
}

// Every native open goes through it: a few checkpoints' metadata, at most
// 8 MiB of metadata.json text in all (about 40,000 chunks; a larger file,
// such as a 16,384-rank dense model's 15 MB, is parsed on every open rather
// than kept in every rank's memory).
// Each entry keeps its chunks' block layouts (chunk_layouts.h) with it.
struct ParsedNative {
  CheckpointMetadata metadata;
  std::shared_ptr<ChunkLayouts> layouts = std::make_shared<ChunkLayouts>();
};
ParsedTextCache<ParsedNative>& ParsedMetadata() {
  static ParsedTextCache<ParsedNative> cache(4, 8 << 20);
  return cache;
}

class NativeFormatImpl : public Format {
 public:
  std::string_view name() const override { return "native"; }

  static constexpr uint64_t kLargestForeignMetadata = 4 << 10;

  bool Detect(Env* env, const std::string& dir) const override {
    const std::string path = JoinPath(dir, kMetadataFileName);
    if (!env->FileExists(path)) return false;
    // Megatron's own metadata.json is a handful of fields; anything larger is
    // ours, and is parsed once, by OpenReader, not twice.
    if (env->FileSize(path) > kLargestForeignMetadata) return true;
    const std::string text = ReadFileToString(env, path);
    if (JsonNestingDepth(text) > kMaxJsonDepth) return true;  // OpenReader refuses it
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    // A damaged metadata.json is still ours (opening it reports the damage);
    // Megatron writes one of its own ("sharded_backend") beside torch_dist data.
    if (!j.is_object()) return true;
    if (j.contains("sharded_backend")) return false;
    auto format = j.find("format");
    return format == j.end() || *format == name();
  }

  std::string PrepareDirectory(Env* env, const std::string& dir, bool overwrite) const override {
    return PrepareStagedDirectory(env, dir, overwrite, Layout());
  }

  void RemoveUncommitted(Env* env, const std::string& dir,
                         const std::string& write_dir) const override {
    RemoveUncommittedSave(env, dir, write_dir, Layout());
  }

  std::unique_ptr<CheckpointWriter> NewWriter(Env* env, const std::string& write_dir,
                                              int rank) const override {
    return std::make_unique<NativeWriter>(env, write_dir, rank);
  }

  std::unique_ptr<CheckpointWriter> NewStreamWriter(Env* env, const std::string& write_dir,
                                                    int rank, int stream) const override {
    return std::make_unique<NativeWriter>(env, write_dir, rank, stream);
  }

  void Commit(Env* env, const std::string& dir, const std::string& write_dir,
              CheckpointMetadata metadata) const override {
    if (metadata.format != name()) {
      Fail(ErrorKind::kInvalidArgument, "cannot commit {} version {} metadata as native version {}",
           metadata.format, metadata.format_version, kNativeFormatVersion);
    }
    // Merged rank metadata is written as the current version; every chunk
    // must carry what that version stores (NativeWriter's block checksums in
    // the data file, and their checksum).
    CheckpointMetadata current = WithoutDuplicateEmptyChunks(std::move(metadata));
    current.format_version = kNativeFormatVersion;
    for (const auto& [key, tensor] : current.tensors) {
      for (const StoredChunk& chunk : tensor.chunks) {
        if (chunk.block_size == 0 || !chunk.sums_checksum ||
            (chunk.length > 0 && chunk.tiles == 0) || (chunk.flat && !chunk.flat_rows)) {
          Fail(ErrorKind::kInvalidArgument,
               "cannot commit tensor '{}' as native version {}: a chunk has no block checksums "
               "in its data file",
               key, kNativeFormatVersion);
        }
      }
    }
    WriteFileAtomic(env, JoinPath(write_dir, kMetadataFileName), MetadataToText(current));
    SwapInStaging(env, dir, write_dir);  // overwrite: FORMAT.md, crash windows
  }

  std::unique_ptr<CheckpointReader> OpenReader(Env* env, const std::string& dir) const override {
    RequireCheckpointDirectory(env, dir, Layout());
    const std::string path = JoinPath(dir, kMetadataFileName);
    if (!env->FileExists(path)) {
      Fail(ErrorKind::kIncomplete,
           "{} is not a distributed checkpoint (metadata.json missing: save did not commit)", dir);
    }
    // Parsed once per text (metadata_cache.h): a changed file is parsed again.
    std::shared_ptr<const ParsedNative> parsed =
        ParsedMetadata().Get(path, ReadFileToString(env, path), [&](std::string_view text) {
          CheckpointMetadata parsed = MetadataFromText(text, path);
          if (parsed.format != name()) {
            Fail(ErrorKind::kCorruption, "{}: format: expected \"native\", got \"{}\"", path,
                 parsed.format);
          }
          CheckChunkTiling(parsed, path);
          return ParsedNative{std::move(parsed)};
        });
    std::shared_ptr<const CheckpointMetadata> metadata(parsed, &parsed->metadata);
    return std::make_unique<NativeReader>(env, dir, std::move(metadata), parsed->layouts);
  }
};

}  // namespace

const Format& NativeFormat() {
  static const NativeFormatImpl format;
  return format;
}

}  // namespace distckpt
