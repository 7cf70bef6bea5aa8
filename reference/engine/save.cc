#include "engine/save.h"

#include <chrono>

#include "core/error.h"
#include "engine/common_state.h"
#include "engine/global_validation.h"
#include "engine/save_steps.h"
#include "mapping/dict_utils.h"
#include "mapping/validation.h"
#include "strategy/device_staging.h"
#include "strategy/strategy.h"
#include "wire/messages.h"

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

// Warns (never fails) when this rank's common state differs from rank 0's.
void CompareCommonState(const nlohmann::json& common, Communicator& comm, SaveSummary& summary) {
  std::string rank0 = comm.rank() == kCoordinator ? common.dump() : std::string();
  comm.Broadcast(rank0, kCoordinator);
  if (comm.rank() == kCoordinator) return;
  std::string warning = CommonStateDifference(
      comm.rank(), CommonFromJson(nlohmann::json::parse(rank0)), CommonFromJson(common));
  if (!warning.empty()) summary.warnings.push_back(std::move(warning));
}

// Writes what this rank saves, in tree order. Device tensors are staged
// through page-locked buffers, the next one's copy overlapping this one's
// write (strategy/device_staging.h). With a thread to spare (`threads` > 1)
// the writer hashes large chunks on a helper thread while it writes them;
// one is enough for a hash that runs faster than the kernel's copy.
CheckpointMetadata WriteMainReplicas(const PreparedSave& prepared, int rank, int threads,
                                     SaveSummary& summary) {
  struct Item {
    const ShardedTensor* tensor = nullptr;  // else an object
    const ShardedObject* object = nullptr;
    std::string payload{};
    bool staged = false;  // device memory, copied through a staging buffer
  };
  std::vector<Item> items;
  std::vector<Tensor> data;  // of the tensor items, in order
  ForEachItemToWrite(
      prepared.sharded(), *prepared.format,
      [&](const ShardedTensor& t, const Tensor& bytes) {
        items.push_back({.tensor = &t, .staged = bytes.defined() && !bytes.device().is_cpu()});
        data.push_back(bytes);
      },
      [&](const ShardedObject& o, const std::string& payload) {
        items.push_back({.object = &o, .payload = payload});
      });
  DeviceToHostPipeline staged(std::move(data), SharedStagingPool());
  std::unique_ptr<CheckpointWriter> writer =
      prepared.format->NewWriter(prepared.env, prepared.write_dir, rank);
  writer->SetHelpers(threads > 1 ? 1 : 0);
  // Consecutive host tensors go to the writer together (their bytes stay
  // put); a staged device tensor's bytes last only until the next is taken.
  std::vector<ChunkToWrite> batch;
  auto write_batch = [&] {
    writer->WriteTensorChunks(batch);
    summary.chunks_written += batch.size();
    batch.clear();
  };
  for (const Item& item : items) {
    if (const ShardedTensor* t = item.tensor) {
      batch.push_back(
          {&t->key, t->dtype, &t->global_shape, t->GlobalBox(), t->flattened_range, staged.Next()});
      if (item.staged) write_batch();
    } else {
      write_batch();
      const ShardedObject& o = *item.object;
      writer->WriteObject(o.key, o.UniqueKey(), o.global_shape, o.global_offset,
                          std::as_bytes(std::span(item.payload)));
    }
  }
  write_batch();
  CheckpointMetadata local = writer->Finish();
  summary.bytes_written = writer->bytes_written();
  summary.bytes_staged = staged.bytes_copied();
  return local;
}

// What a save plan depends on besides this rank's shard metadata: the
// options that shape what it writes and the rank's place in its group.
std::string SavePlanContext(const Format& format, const SaveOptions& options, Communicator& comm) {
  const Communicator& group = options.strategy.group ? *options.strategy.group : comm;
  return fmt::format("save|{}|{}|{}|{}|{}", format.name(), options.validate_access_integrity,
                     static_cast<int>(options.strategy.kind), group.rank(), group.size());
}

}  // namespace

PreparedSave PrepareSave(const Node& state_dict, const std::string& dir, Communicator& comm,
                         const SaveOptions& options, SaveSummary& summary, bool borrow) {
  PreparedSave prepared;
  prepared.format = options.format ? options.format : &NativeFormat();
  prepared.env = options.env ? options.env : Env::Default();
  AgreeOnOutcome(comm, [&] {
    if (borrow && IsShardedOnly(state_dict)) {
      // The state dict is its own sharded piece (SavePreprocess would copy
      // every leaf: 0.14-0.3 ms for 256 ShardedTensors), with no common state.
      CheckLocalShards(state_dict);
      prepared.borrowed = &state_dict;
      prepared.common = CommonToJson(state_dict.is<List>() ? Node(List{}) : Node(Dict{}));
    } else {
      SavePieces pieces = SavePreprocess(state_dict);
      CheckLocalShards(pieces.sharded);
      prepared.owned = std::move(pieces.sharded);
      prepared.common = CommonToJson(pieces.common);
    }
    if (!options.content_metadata.is_null())
      prepared.common["content_metadata"] = options.content_metadata;
    if (prepared.format->CommonStateAsObject() && comm.rank() == kCoordinator) {
      // Megatron-Core 0.20: rank 0 saves the common dict as one more sharded
      // object (common_state/shard_0_1), written with its data.
      // (Its path in the state dict is not stored; it cannot meet a user's.)
      Node& sharded = prepared.mutable_sharded();
      if (!sharded.is<Dict>()) sharded = Node(Dict{});
      sharded.as<Dict>()["\x01common_state"] = Node(
          ShardedObject{kCommonStateKey, prepared.common, {1}, {0}, {0}, options.common_record});
    }
  });
  PlanCache* cache = options.strategy.cache;
  if (cache) {
    prepared.fingerprint =
        PlanFingerprint(prepared.sharded(), SavePlanContext(*prepared.format, options, comm));
    prepared.reused_plan = PlanReusable(*cache, prepared.fingerprint, comm);
  }
  if (options.validate_access_integrity && !prepared.reused_plan) {
    ValidateGlobalSharding(prepared.sharded(), comm);
    CompareCommonState(prepared.common, comm, summary);
  }
  const ShardDistribution* reused =
      prepared.reused_plan && cache->distribution ? &*cache->distribution : nullptr;
  // Only a fully parallel save rewrites replica ids.
  if (options.strategy.kind != SaveStrategy::Kind::kPlain) {
    prepared.distribution =
        AssignWriters(options.strategy, prepared.mutable_sharded(), comm, reused);
  }
  // A rank may now write a replica it holds without data.
  if (prepared.distribution) AgreeOnOutcome(comm, [&] { CheckLocalShards(prepared.sharded()); });
  AgreeOnOutcome(comm, [&] {
    if (comm.rank() == kCoordinator) {
      // Two saves into one directory would commit a mix: the second is
      // refused, naming the first, where the storage has locks (an object
      // store has none: its commit, metadata last, is still one step).
      if (prepared.env->capabilities().locks) {
        std::string base = dir;
        while (base.size() > 1 && base.back() == '/') base.pop_back();
        prepared.env->CreateDirs(DirName(base));  // for the lock file; not `dir` itself
        prepared.lock = FileLock::LockForSave(prepared.env, dir);
      }
      prepared.write_dir = prepared.format->PrepareDirectory(prepared.env, dir, options.overwrite);
    }
  });
  comm.Broadcast(prepared.write_dir, kCoordinator);
  return prepared;
}

void ForEachItemToWrite(
    const Node& sharded, const Format& format,
    const std::function<void(const ShardedTensor&, const Tensor&)>& tensor,
    const std::function<void(const ShardedObject&, const std::string&)>& object) {
  const std::string_view encoding = format.ObjectRecordEncoding();
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (t->LocalNumel() > 0) {
        if (IsMainReplica(t->replica_id)) tensor(*t, t->data);
      } else if (Volume(t->global_shape) == 0) {
        // A tensor of no elements is recorded (dtype, global shape; PyTorch
        // DCP keeps such tensors too) by every rank holding any replica of
        // it, as DCP plans replicated items: a layout without a main replica
        // is still valid, and MergeFrom keeps one chunk per offset.
        tensor(*t, Tensor());
      }
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      if (!IsMainReplica(o->replica_id)) return;
      const ObjectRecord* record = o->UnchangedRecord();
      if (record && !encoding.empty() && record->encoding == encoding) {
        object(*o, record->bytes);  // as stored: what JSON would lose is kept
      } else {
        object(*o, o->data.dump());
      }
    }
  });
}

void CommitSave(CheckpointMetadata local, const PreparedSave& prepared, const std::string& dir,
                Communicator& comm, const SaveOptions& options) {
  PlanCache* cache = options.strategy.cache;
  // Only the checksums when this rank's written layout is the cached one, else
  // all it wrote; the coordinator sends nothing and takes its own as it is.
  const bool coordinator = comm.rank() == kCoordinator;
  std::string payload;
  if (cache && prepared.reused_plan && !coordinator) {
    if (auto checksums = ChecksumsIfSameLayout(local, cache->written)) {
      payload = EncodeWrittenChecksums(*checksums);
    }
  }
  if (payload.empty() && !coordinator) payload = EncodeWritten(local);
  std::vector<std::string> all = comm.Gather(payload, kCoordinator);
  // Each rank's metadata is merged as it is decoded; copies are kept only
  // for the plan cache.
  std::vector<CheckpointMetadata> written;
  AgreeOnOutcome(comm, [&] {
    if (!coordinator) return;
    CheckpointMetadata merged;
    merged.format = std::string(prepared.format->name());
    merged.writer = local.writer;
    merged.topology = options.topology;
    auto merge = [&](CheckpointMetadata&& md) {
      if (cache) written.push_back(md);
      merged.MergeFrom(std::move(md));
    };
    for (size_t r = 0; r < all.size(); ++r) {
      if (static_cast<int>(r) == kCoordinator) {
        merge(cache ? CheckpointMetadata(local) : std::move(local));
        continue;
      }
      Written rank = DecodeWritten(all[r], static_cast<int>(r));
      if (rank.metadata) {
        merge(std::move(*rank.metadata));
      } else if (cache && r < cache->ranks_written.size()) {
        merge(WithChecksums(cache->ranks_written[r], rank.checksums));
      } else {
        Fail(ErrorKind::kCorruption, "rank {} reused a save plan the coordinator does not have", r);
      }
    }
    merged.common = prepared.common;
    if (!options.content_metadata.is_null()) merged.content = options.content_metadata;
    prepared.format->Commit(prepared.env, dir, prepared.write_dir, std::move(merged));
  });
  if (!cache) return;
  cache->filled = true;
  cache->fingerprint = prepared.fingerprint;
  cache->distribution = prepared.distribution;
  cache->written = local;
  cache->ranks_written = std::move(written);
  if (prepared.reused_plan) ++cache->hits;
}

void RemoveFailedSave(const PreparedSave& prepared, const std::string& dir, Communicator& comm) {
  if (comm.rank() != kCoordinator || prepared.write_dir.empty()) return;
  try {
    prepared.format->RemoveUncommitted(prepared.env, dir, prepared.write_dir);
  } catch (const CheckpointError&) {
  }
}

SaveSummary Save(const Node& state_dict, const std::string& dir, Communicator& comm,
                 const SaveOptions& options) {
  auto start = std::chrono::steady_clock::now();
  SaveSummary summary;
  PreparedSave prepared = PrepareSave(state_dict, dir, comm, options, summary, /*borrow=*/true);
  try {
    CheckpointMetadata local;
    AgreeOnOutcome(comm, [&] {
      local = WriteMainReplicas(prepared, comm.rank(), ThreadsPerRank(comm), summary);
    });
    CommitSave(std::move(local), prepared, dir, comm, options);
  } catch (const CheckpointError&) {  // every rank's (AgreeOnOutcome): no rank writes any more
    RemoveFailedSave(prepared, dir, comm);
    throw;
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace distckpt
