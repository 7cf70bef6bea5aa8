// The files Megatron-Core's torch_dist backend keeps beside DCP's
// (docs/megatron-semantics.md §3.2): `metadata.json`, its CheckpointingConfig
// naming the backends, and `common.pt`, torch.save of the common
// (non-sharded) state dict.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_
#define DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "io/env.h"

namespace distckpt {

inline constexpr char kMegatronConfigFileName[] = "metadata.json";
inline constexpr char kMegatronCommonFileName[] = "common.pt";
inline constexpr char kDcpMetadataFileName[] = ".metadata";

// {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
//  "common_backend": "torch", "common_backend_version": 1}: exactly the
// fields Megatron's CheckpointingConfig takes (it rejects any other).
std::string TorchDistConfigText();
// The sharded_backend a Megatron metadata.json names; nullopt when `text`
// is not such a file (a native distckpt metadata.json, say).
std::optional<std::string> MegatronShardedBackend(std::string_view text);

// Megatron-Core 0.18+'s `integrity.json` (dist_checkpointing/validation.py,
// save_integrity / verify_integrity): {"algorithm": "sha256", "files":
// {"<name>": "<hex digest>"}} over every other file of the directory.
inline constexpr char kMegatronIntegrityFileName[] = "integrity.json";

struct IntegrityCheck {
  bool present = false;  // the directory has an integrity.json
  uint64_t files = 0, bytes = 0;
};
// Checks every file integrity.json lists against its SHA-256, reading each
// once in 4 MiB pieces. kCorruption naming the manifest, or the file and
// both digests, on a malformed manifest, an unsupported algorithm, a listed
// name that is not a plain file name, or a missing or changed file.
IntegrityCheck VerifyMegatronIntegrity(Env* env, const std::string& dir);
// Writes `dir`/integrity.json over every regular file of `dir` (the
// manifest itself excluded), as Megatron's save_integrity_manifest does.
void WriteMegatronIntegrity(Env* env, const std::string& dir);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_
