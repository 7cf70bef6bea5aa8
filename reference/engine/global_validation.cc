#include "engine/global_validation.h"

#include "mapping/validation.h"
#include "wire/messages.h"

namespace distckpt {

void ValidateGlobalSharding(const Node& sharded, Communicator& comm) {
  constexpr int kCoordinator = 0;
  const bool coordinator = comm.rank() == kCoordinator;
  std::vector<std::string> all = comm.Gather(
      coordinator ? std::string() : EncodeShardedMetadata(CollectLocalMetadata(sharded)),
      kCoordinator);
  AgreeOnOutcome(comm, [&] {
    if (!coordinator) return;
    // The coordinator's own shards are validated where they are, in its tree.
    std::vector<LocalMetadata> decoded(all.size());
    std::vector<std::vector<ShardRef>> global(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (static_cast<int>(r) == kCoordinator) {
        global[r] = CollectShardRefs(sharded);
      } else {
        decoded[r] = DecodeShardedMetadata(all[r], static_cast<int>(r));
        global[r] = ShardRefs(decoded[r]);
      }
    }
    ValidateShardingIntegrity(global);
  });
}

}  // namespace distckpt
