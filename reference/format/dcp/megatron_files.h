// The files Megatron-Core's torch_dist backend keeps beside DCP's
// (docs/megatron-semantics.md §3.2): `metadata.json`, its CheckpointingConfig
// naming the backends, and `common.pt`, torch.save of the common
// (non-sharded) state dict.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_
#define DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_

#include <optional>
#include <string>
#include <string_view>

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

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_MEGATRON_FILES_H_
