#include "engine/save.h"

#include <chrono>

#include "core/error.h"
#include "engine/common_state.h"
#include "format/native/metadata_json.h"
#include "mapping/dict_utils.h"
#include "mapping/validation.h"

namespace distckpt {
namespace {

constexpr int kCoordinator = 0;

// Checks every shard of this rank: Megatron's metadata integrity rules and
// that a non-empty main replica carries data to write.
void CheckLocalShards(const Node& sharded) {
  ForEachLeaf(sharded, [](const NodePath& path, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      t->ValidateMetadataIntegrity();
      if (!t->data.defined() && t->LocalNumel() > 0) {
        Fail(ErrorKind::kInvalidArgument, "`data` attr is None for {} (at '{}')", t->ToString(),
             PathToString(path));
      }
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      o->ValidateMetadataIntegrity();
    }
  });
}

// Gathers every rank's shard metadata and validates the global sharding on
// the coordinator; every rank receives the verdict.
void ValidateGlobalSharding(const Node& sharded, Communicator& comm) {
  std::string mine = LocalMetadataToJson(CollectLocalMetadata(sharded)).dump();
  std::vector<std::string> all = comm.Gather(mine, kCoordinator);
  AgreeOnOutcome(comm, [&] {
    if (comm.rank() != kCoordinator) return;
    GlobalMetadata global;
    global.reserve(all.size());
    for (const std::string& s : all) global.push_back(LocalMetadataFromJson(nlohmann::json::parse(s)));
    ValidateShardingIntegrity(global);
  });
}

// Warns (never fails) when this rank's common state differs from rank 0's.
void CompareCommonState(const nlohmann::json& common, Communicator& comm, SaveSummary& summary) {
  std::string rank0 = comm.rank() == kCoordinator ? common.dump() : std::string();
  comm.Broadcast(rank0, kCoordinator);
  if (comm.rank() == kCoordinator) return;
  std::string warning = CommonStateDifference(
      comm.rank(), CommonFromJson(nlohmann::json::parse(rank0)), CommonFromJson(common));
  if (!warning.empty()) summary.warnings.push_back(std::move(warning));
}

CheckpointMetadata WriteMainReplicas(const Node& sharded, const Format& format, Env* env,
                                     const std::string& write_dir, int rank,
                                     SaveSummary& summary) {
  std::unique_ptr<CheckpointWriter> writer = format.NewWriter(env, write_dir, rank);
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (!IsMainReplica(t->replica_id) || t->LocalNumel() == 0) return;
      writer->WriteTensorChunk(t->key, t->dtype, t->global_shape, t->GlobalBox(), t->flattened_range,
                               t->data.bytes());
      ++summary.chunks_written;
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      if (!IsMainReplica(o->replica_id)) return;
      std::string payload = o->data.dump();
      writer->WriteObject(o->key, o->UniqueKey(), o->global_shape, o->global_offset,
                          std::as_bytes(std::span(payload)));
    }
  });
  CheckpointMetadata local = writer->Finish();
  summary.bytes_written = writer->bytes_written();
  return local;
}

}  // namespace

SaveSummary Save(const Node& state_dict, const std::string& dir, Communicator& comm,
                 const SaveOptions& options) {
  auto start = std::chrono::steady_clock::now();
  const Format& format = options.format ? *options.format : NativeFormat();
  Env* env = options.env ? options.env : Env::Default();
  SaveSummary summary;

  SavePieces pieces;
  nlohmann::json common;
  AgreeOnOutcome(comm, [&] {
    pieces = SavePreprocess(state_dict);
    CheckLocalShards(pieces.sharded);
    common = CommonToJson(pieces.common);
    if (!options.content_metadata.is_null()) common["content_metadata"] = options.content_metadata;
  });
  if (options.validate_access_integrity) {
    ValidateGlobalSharding(pieces.sharded, comm);
    CompareCommonState(common, comm, summary);
  }

  std::string write_dir;
  AgreeOnOutcome(comm, [&] {
    if (comm.rank() == kCoordinator) write_dir = format.PrepareDirectory(env, dir, options.overwrite);
  });
  comm.Broadcast(write_dir, kCoordinator);

  CheckpointMetadata local;
  AgreeOnOutcome(comm, [&] {
    local = WriteMainReplicas(pieces.sharded, format, env, write_dir, comm.rank(), summary);
  });

  std::vector<std::string> all = comm.Gather(MetadataToJson(local).dump(), kCoordinator);
  AgreeOnOutcome(comm, [&] {
    if (comm.rank() != kCoordinator) return;
    CheckpointMetadata merged;
    merged.format = std::string(format.name());
    merged.writer = local.writer;
    merged.topology = options.topology;
    for (const std::string& s : all) {
      merged.MergeFrom(MetadataFromJson(nlohmann::json::parse(s), "rank metadata"));
    }
    merged.common = common;
    if (!options.content_metadata.is_null()) merged.content = options.content_metadata;
    format.Commit(env, dir, write_dir, merged);
  });

  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace distckpt
