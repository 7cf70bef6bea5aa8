#include "format/dcp/megatron_files.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/json_parse.h"

namespace distckpt {

std::string TorchDistConfigText() {
  nlohmann::ordered_json config = {{"sharded_backend", "torch_dist"},
                                   {"sharded_backend_version", 1},
                                   {"common_backend", "torch"},
                                   {"common_backend_version", 1}};
  return config.dump();
}

std::optional<std::string> MegatronShardedBackend(std::string_view text) {
  if (JsonNestingDepth(text) > kMaxJsonDepth) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto backend = j.find("sharded_backend");
  if (backend == j.end() || !backend->is_string()) return std::nullopt;
  return backend->get<std::string>();
}

namespace {

// The lowercase hex SHA-256 of `path`, read through `env` in 4 MiB pieces.
std::string Sha256Hex(Env* env, const std::string& path, uint64_t* bytes) {
  std::unique_ptr<RandomAccessFile> file = env->NewRandomAccessFile(path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    Fail(ErrorKind::kUnsupported, "{}: this OpenSSL cannot compute SHA-256", path);
  std::vector<std::byte> buffer(uint64_t{4} << 20);
  const uint64_t size = file->size();
  for (uint64_t offset = 0; offset < size;) {
    const uint64_t n = std::min<uint64_t>(buffer.size(), size - offset);
    file->Read(offset, std::span(buffer.data(), n));
    EVP_DigestUpdate(ctx.get(), buffer.data(), n);
    offset += n;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  *bytes += size;
  return hex;
}

}  // namespace

IntegrityCheck VerifyMegatronIntegrity(Env* env, const std::string& dir) {
  IntegrityCheck check;
  const std::string manifest_path = JoinPath(dir, kMegatronIntegrityFileName);
  if (!env->FileExists(manifest_path)) return check;
  check.present = true;
  const std::string text = ReadFileToString(env, manifest_path);
  CheckJsonDepth(text, manifest_path);
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_object()) {
    Fail(ErrorKind::kCorruption, "{}: not Megatron's integrity manifest (no \"files\" object)",
         manifest_path);
  }
  const std::string algorithm = manifest.contains("algorithm") && manifest["algorithm"].is_string()
                                    ? manifest["algorithm"].get<std::string>()
                                    : "sha256";
  if (algorithm != "sha256") {
    Fail(ErrorKind::kCorruption, "{}: unsupported hash algorithm '{}' (Megatron writes sha256)",
         manifest_path, algorithm);
  }
  for (const auto& [name, digest] : manifest["files"].items()) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        !digest.is_string()) {
      Fail(ErrorKind::kCorruption, "{}: entry '{}' is not a plain file name with a hex digest",
           manifest_path, name);
    }
    const std::string path = JoinPath(dir, name);
    if (!env->FileExists(path)) {
      Fail(ErrorKind::kCorruption, "{}: {} is listed but missing", manifest_path, path);
    }
    const std::string actual = Sha256Hex(env, path, &check.bytes);
    if (actual != digest.get<std::string>()) {
      Fail(ErrorKind::kCorruption,
           "{}: {} does not match its SHA-256 in {} (expected {}, found {}): the file changed "
           "after the save",
           path, name, kMegatronIntegrityFileName, digest.get<std::string>(), actual);
    }
    ++check.files;
  }
  return check;
}

void WriteMegatronIntegrity(Env* env, const std::string& dir) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  uint64_t bytes = 0;
  for (const std::string& name : env->ListDir(dir)) {
    const std::string path = JoinPath(dir, name);
    if (name == kMegatronIntegrityFileName || env->IsDirectory(path)) continue;
    files[name] = Sha256Hex(env, path, &bytes);
  }
  nlohmann::ordered_json manifest = {{"algorithm", "sha256"}, {"files", files}};
  WriteFileAtomic(env, JoinPath(dir, kMegatronIntegrityFileName), manifest.dump(2));
}

}  // namespace distckpt
