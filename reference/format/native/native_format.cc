// The native Format: data files written by NativeWriter, metadata.json
// (metadata_json.h) committed last, read by NativeReader. FORMAT.md has the
// byte layout and the crash windows of an overwrite.
#include "core/error.h"
#include "format/format.h"
#include "format/native/metadata_json.h"
#include "format/native/native_reader.h"
#include "format/native/native_writer.h"

namespace distckpt {
namespace {

constexpr char kTempMetadataFileName[] = "metadata.json.tmp";  // WriteFileAtomic's temp

// `dir` + suffix, naming a sibling of `dir` even when it ends in '/'.
std::string Sibling(const std::string& dir, std::string_view suffix) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + std::string(suffix);
}

std::string StagingDir(const std::string& dir) { return Sibling(dir, ".staging"); }
std::string OldDir(const std::string& dir) { return Sibling(dir, ".old"); }
std::string ParentDir(const std::string& dir) { return DirName(Sibling(dir, "")); }

bool IsCommitted(Env* env, const std::string& dir) {
  return env->FileExists(JoinPath(dir, kMetadataFileName));
}

// Removes what an uncommitted save left behind; other files are the user's.
void RemoveStaleFiles(Env* env, const std::string& dir) {
  for (const std::string& name : env->ListDir(dir)) {
    if (IsDataFileName(name) || name == kTempMetadataFileName) env->RemoveFile(JoinPath(dir, name));
  }
}

class NativeFormatImpl : public Format {
 public:
  std::string_view name() const override { return "native"; }

  static constexpr uint64_t kLargestForeignMetadata = 64 << 10;

  bool Detect(Env* env, const std::string& dir) const override {
    const std::string path = JoinPath(dir, kMetadataFileName);
    if (!env->FileExists(path)) return false;
    // Megatron's own metadata.json is a handful of fields; anything larger is
    // ours, and is parsed once, by OpenReader, not twice.
    if (env->FileSize(path) > kLargestForeignMetadata) return true;
    nlohmann::json j = nlohmann::json::parse(ReadFileToString(env, path), nullptr,
                                             /*allow_exceptions=*/false);
    // A damaged metadata.json is still ours (opening it reports the damage);
    // Megatron writes one of its own ("sharded_backend") beside torch_dist data.
    if (!j.is_object()) return true;
    if (j.contains("sharded_backend")) return false;
    auto format = j.find("format");
    return format == j.end() || *format == name();
  }

  std::string PrepareDirectory(Env* env, const std::string& dir, bool overwrite) const override {
    const std::string staging = StagingDir(dir);
    const std::string old = OldDir(dir);
    if (!env->IsDirectory(dir) && IsCommitted(env, staging)) {
      // A crash between the two renames of an overwrite: finish the swap.
      env->RenameFile(staging, dir);
      env->SyncDir(ParentDir(dir));
      env->RemoveAll(old);
    }
    if (IsCommitted(env, dir)) {
      if (!overwrite) {
        Fail(ErrorKind::kInvalidArgument,
             "refusing to overwrite committed checkpoint {} (pass overwrite)", dir);
      }
      if (env->FileExists(old)) {
        Fail(ErrorKind::kInvalidArgument,
             "cannot overwrite {}: {} exists (an interrupted overwrite leaves the previous "
             "checkpoint there); remove or rename it first",
             dir, old);
      }
      env->RemoveAll(staging);
      env->CreateDirs(staging);
      return staging;
    }
    env->CreateDirs(dir);
    RemoveStaleFiles(env, dir);
    return dir;
  }

  std::unique_ptr<CheckpointWriter> NewWriter(Env* env, const std::string& write_dir,
                                              int rank) const override {
    return std::make_unique<NativeWriter>(env, write_dir, rank);
  }

  std::unique_ptr<CheckpointWriter> NewStreamWriter(Env* env, const std::string& write_dir, int rank,
                                                    int stream) const override {
    return std::make_unique<NativeWriter>(env, write_dir, rank, stream);
  }

  void Commit(Env* env, const std::string& dir, const std::string& write_dir,
              const CheckpointMetadata& metadata) const override {
    if (metadata.format != name() || metadata.format_version != kNativeFormatVersion) {
      Fail(ErrorKind::kInvalidArgument, "cannot commit {} version {} metadata as native version {}",
           metadata.format, metadata.format_version, kNativeFormatVersion);
    }
    WriteFileAtomic(env, JoinPath(write_dir, kMetadataFileName), MetadataToText(metadata));
    if (write_dir == dir) return;
    // Overwrite: swap the committed staging directory in (FORMAT.md, crash windows).
    const std::string old = OldDir(dir);
    env->RenameFile(dir, old);
    try {
      env->RenameFile(write_dir, dir);
    } catch (const CheckpointError&) {
      try {
        env->RenameFile(old, dir);  // put the previous checkpoint back
      } catch (const CheckpointError&) {
        // Both checkpoints survive (dir.old, staging); PrepareDirectory finishes the swap.
      }
      throw;
    }
    env->SyncDir(ParentDir(dir));
    env->RemoveAll(old);
  }

  std::unique_ptr<CheckpointReader> OpenReader(Env* env, const std::string& dir) const override {
    if (!env->IsDirectory(dir)) {
      const std::string staging = StagingDir(dir);
      Fail(ErrorKind::kIncomplete, "Checkpoint directory {} does not exist{}", dir,
           IsCommitted(env, staging)
               ? fmt::format(" (an interrupted overwrite left the new checkpoint in {}; the next "
                             "save to {} finishes the swap)",
                             staging, dir)
               : "");
    }
    const std::string path = JoinPath(dir, kMetadataFileName);
    if (!env->FileExists(path)) {
      Fail(ErrorKind::kIncomplete,
           "{} is not a distributed checkpoint (metadata.json missing: save did not commit)", dir);
    }
    CheckpointMetadata metadata = MetadataFromText(ReadFileToString(env, path), path);
    if (metadata.format != name()) {
      Fail(ErrorKind::kCorruption, "{}: format: expected \"native\", got \"{}\"", path,
           metadata.format);
    }
    CheckChunkTiling(metadata, path);
    return std::make_unique<NativeReader>(env, dir, std::move(metadata));
  }
};

}  // namespace

const Format& NativeFormat() {
  static const NativeFormatImpl format;
  return format;
}

}  // namespace distckpt
