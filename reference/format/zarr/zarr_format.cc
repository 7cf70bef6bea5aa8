#include "format/zarr/zarr_format.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/dcp/megatron_files.h"
#include "format/zarr/zarr_reader.h"

namespace distckpt {
namespace {

// Megatron's metadata.json is four fields; a larger file is not its.
constexpr uint64_t kLargestConfig = 64 << 10;

// Megatron's config in `dir`, parsed; nullopt when there is none (missing,
// not a regular file, too large, not a JSON object).
std::optional<nlohmann::json> MegatronConfig(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kMegatronConfigFileName);
  if (!env->FileExists(path) || env->IsDirectory(path) || env->FileSize(path) > kLargestConfig) {
    return std::nullopt;
  }
  std::string text;
  try {
    text = ReadFileToString(env, path);  // no-follow, regular files only
  } catch (const CheckpointError&) {
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

bool IsZarrConfig(const std::optional<nlohmann::json>& config) {
  if (!config) return false;
  auto backend = config->find("sharded_backend");
  return backend != config->end() && *backend == "zarr";
}

class ZarrFormatImpl : public Format {
 public:
  std::string_view name() const override { return "zarr"; }

  bool Detect(Env* env, const std::string& dir) const override {
    return IsZarrConfig(MegatronConfig(env, dir));
  }

  std::string PrepareDirectory(Env*, const std::string&, bool) const override { ReadOnly(); }
  void RemoveUncommitted(Env*, const std::string&, const std::string&) const override {
    ReadOnly();  // never written, so nothing to remove
  }
  std::unique_ptr<CheckpointWriter> NewWriter(Env*, const std::string&, int) const override {
    ReadOnly();
  }
  void Commit(Env*, const std::string&, const std::string&, CheckpointMetadata) const override {
    ReadOnly();
  }

  std::unique_ptr<CheckpointReader> OpenReader(Env* env, const std::string& dir) const override {
    if (!env->IsDirectory(dir)) {
      Fail(ErrorKind::kIncomplete, "Checkpoint directory {} does not exist", dir);
    }
    const std::string path = JoinPath(dir, kMegatronConfigFileName);
    const std::optional<nlohmann::json> config = MegatronConfig(env, dir);
    if (!IsZarrConfig(config)) {
      Fail(ErrorKind::kIncomplete,
           "{} is not a Megatron zarr checkpoint ({} does not name \"sharded_backend\": \"zarr\"; "
           "Megatron writes it last, so a save that did not finish has none)",
           dir, path);
    }
    auto version = config->find("sharded_backend_version");
    if (version != config->end() && *version != 1) {
      Fail(ErrorKind::kUnsupported,
           "{}: sharded_backend_version {} (distckpt reads version 1 of the zarr backend)", path,
           version->dump());
    }
    return std::make_unique<ZarrReader>(env, dir);
  }

 private:
  [[noreturn]] static void ReadOnly() {
    Fail(ErrorKind::kUnsupported,
         "distckpt reads the zarr format but does not write it (Megatron-Core 0.16 removed the "
         "zarr backend): save as dcp");
  }
};

}  // namespace

const Format& ZarrFormat() {
  static const ZarrFormatImpl format;
  return format;
}

}  // namespace distckpt
