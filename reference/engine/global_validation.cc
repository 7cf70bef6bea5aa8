#include "engine/global_validation.h"

#include "mapping/validation.h"
#include "wire/messages.h"

namespace distckpt {

void ValidateGlobalSharding(const Node& sharded, Communicator& comm) {
  constexpr int kCoordinator = 0;
  LocalMetadata mine = CollectLocalMetadata(sharded);
  const bool coordinator = comm.rank() == kCoordinator;
  std::vector<std::string> all =
      comm.Gather(coordinator ? std::string() : EncodeShardedMetadata(mine), kCoordinator);
  AgreeOnOutcome(comm, [&] {
    if (!coordinator) return;
    GlobalMetadata global;
    global.reserve(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      global.push_back(static_cast<int>(r) == kCoordinator
                           ? std::move(mine)
                           : DecodeShardedMetadata(all[r], static_cast<int>(r)));
    }
    ValidateShardingIntegrity(global);
  });
}

}  // namespace distckpt
