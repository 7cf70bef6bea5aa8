#include "harness/tools/verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <vector>

#include "comm/thread_world.h"
#include "core/error.h"
#include "engine/common_state.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/dcp/megatron_files.h"
#include "harness/expand/expand.h"
#include "harness/expand/resave.h"
#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Joined(const std::set<std::string>& keys) {
  return fmt::format("{}", fmt::join(keys, ","));
}

// Rank `rank`'s request for a real checkpoint: objects only where the
// stored grid matches (objects cannot be resharded), no zero fill.
Node RequestFor(const Scenario& spec, const CheckpointMetadata& md, const Topology& saved,
                const Topology& topo, int rank, bool zero_fill, bool objects = true,
                std::map<std::string, std::pair<Shape, Shape>>* regridded = nullptr) {
  std::map<std::string, Shape> grids = StoredObjectGrids(md);
  RequestOptions options{&grids, zero_fill, objects, regridded != nullptr, regridded};
  Node request = BuildLoadRequest(spec, nullptr, saved, topo, rank, options);
  // No object of the spec is stored on this grid (Megatron's resave after a
  // TP/PP change has no rng_state): no "objects" dict at all, or a reshard
  // would carry an empty one into the common state.
  Dict& root = request.as<Dict>();
  if (auto it = root.find("objects"); it != root.end() && it->second.as<Dict>().empty()) {
    root.erase(it);
  }
  return request;
}

// The saved topology for BuildLoadRequest (used only for object grids, which
// come from the metadata here): the given one, the recorded one, or T.
Topology SavedTopology(const VerifyOptions& options, const CheckpointMetadata& md,
                       const Topology& topo) {
  if (!options.saved_topology.empty()) return Topology::Parse(options.saved_topology);
  if (!md.topology.empty()) return Topology::Parse(md.topology);
  return topo;
}

std::string GridString(const Shape& shape) { return ShapeToString(shape); }

}  // namespace

std::vector<ObjectFate> ObjectFates(const Scenario& spec, const CheckpointMetadata& md,
                                    const Topology& topo, bool regrid_objects) {
  std::map<std::string, Shape> stored = StoredObjectGrids(md);
  std::map<std::string, Shape> requested;
  const int ranks = std::min(topo.world_size(), 4096);
  for (int rank = 0; rank < ranks; ++rank) {
    for (const ObjectParam& o : ExpandRank(spec, topo, rank).objects)
      requested.emplace(o.object.key, o.object.global_shape);
  }
  std::vector<ObjectFate> fates;
  for (const auto& [key, grid] : stored) {
    auto it = requested.find(key);
    if (it == requested.end()) {
      fates.push_back({key, "dropped",
                       fmt::format("stored on grid {}; the request spec does not ask for it, so a "
                                   "load leaves it and a reshard does not carry it",
                                   GridString(grid))});
    } else if (it->second != grid && regrid_objects && it->second.size() == grid.size()) {
      fates.push_back(
          {key, "regridded",
           fmt::format("stored on grid {}, topology {} places it on {}: carried regridded, each "
                       "coordinate of the new grid holds the stored one at that coordinate "
                       "modulo {} (ranks beyond the stored grid repeat its RNG streams)",
                       GridString(grid), topo.ToString(), GridString(it->second),
                       GridString(grid))});
    } else if (it->second != grid) {
      fates.push_back(
          {key, "regridded",
           fmt::format("stored on grid {}, topology {} places it on {}: objects are not "
                       "resharded, so it is not loaded or carried (Megatron's load_checkpoint "
                       "likewise skips rng_state after a TP/PP change)",
                       GridString(grid), topo.ToString(), GridString(it->second))});
    } else {
      fates.push_back({key, "kept", fmt::format("grid {}", GridString(grid))});
    }
  }
  return fates;
}

VerifyResult VerifyLoad(const Scenario& spec, const std::string& dir, const std::string& topology,
                        const VerifyOptions& options) {
  auto start = std::chrono::steady_clock::now();
  Env* env = options.env ? options.env : Env::Default();
  const Topology topo = Topology::Parse(topology);
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  const Topology saved = SavedTopology(options, md, topo);

  VerifyResult result;
  result.ranks = topo.world_size();
  CheckThreadWorldFits(result.ranks);  // before the per-rank state below
  std::vector<LoadResult> loads(result.ranks);
  std::vector<uint64_t> tensors(result.ranks), objects(result.ranks);
  // A rank that throws aborts the world (the others' collectives throw
  // kComm); every refusal below is agreed, so each rank holds the same one.
  std::vector<RankOutcome> outcomes = RunRanksCollect(result.ranks, [&](Communicator& comm) {
    const int rank = comm.rank();
    Node request;
    AgreeOnOutcome(comm, [&] {
      // The same refusal a load gives before reading anything.
      if (spec.optimizer || spec.check_stored_optimizer)
        CheckStoredOptimizerResumable(md.common, topo);
      request = RequestFor(spec, md, saved, topo, rank, /*zero_fill=*/false);
    });
    LoadOptions load;
    load.env = env;
    load.strict = options.strict;
    load.plan_only = true;
    loads[rank] = Load(request, dir, comm, load);
    LoadPieces pieces = LoadPreprocess(request);
    ForEachLeaf(pieces.sharded(), [&](const NodePath&, const Node& leaf) {
      tensors[rank] += leaf.is<ShardedTensor>();
      objects[rank] += leaf.is<ShardedObject>();
    });
  });
  std::string comm_error;
  for (const RankOutcome& o : outcomes) {
    if (!o.error) continue;
    try {
      std::rethrow_exception(o.error);
    } catch (const CheckpointError& e) {
      if (e.kind() != ErrorKind::kComm && result.error.empty()) result.error = e.what();
      if (comm_error.empty()) comm_error = e.what();
    } catch (const std::exception& e) {
      if (result.error.empty()) result.error = fmt::format("rank {}: {}", o.rank, e.what());
    }
  }
  if (result.error.empty()) result.error = comm_error;
  result.ok = result.error.empty();
  std::set<std::string> missing, unexpected;
  for (int r = 0; r < result.ranks; ++r) {
    result.tensors += tensors[r];
    result.objects += objects[r];
    result.bytes_needed += loads[r].summary.bytes_needed;
    result.chunk_bytes += loads[r].summary.chunk_bytes;
    missing.insert(loads[r].mismatch.missing.begin(), loads[r].mismatch.missing.end());
    unexpected.insert(loads[r].mismatch.unexpected.begin(), loads[r].mismatch.unexpected.end());
    for (const std::string& w : loads[r].summary.warnings)
      result.warnings.push_back(fmt::format("rank {}: {}", r, w));
  }
  result.missing = Joined(missing);
  result.unexpected = Joined(unexpected);
  // Only for a topology that loads: one that does not may not even expand
  // (tp=5 of a 24-row tensor), and its verdict is the load's error.
  if (result.ok) result.objects_fate = ObjectFates(spec, md, topo);
  result.seconds = SecondsSince(start);
  return result;
}

DataCheck VerifyData(const std::string& dir, Env* env) {
  if (!env) env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  DataCheck check;
  const bool native = md.format == "native";
  check.unverified_metadata = native && md.format_version < 2;  // no metadata checksum
  std::vector<std::byte> buffer;
  for (const auto& [key, tensor] : md.tensors) {
    for (const StoredChunk& chunk : tensor.chunks) {
      reader->CheckStored(tensor, chunk);  // before a buffer of the length it claims
      buffer.resize(chunk.length);
      ReadRun run{0, chunk.length, buffer.data()};
      const uint64_t verified = reader->stats().chunks_verified;
      reader->ReadChunk(tensor, chunk, {&run, 1}, VerifyPolicy::kAlways);
      if (reader->stats().chunks_verified == verified) ++check.unverified_chunks;
      ++check.chunks;
      check.bytes += chunk.length;
    }
  }
  for (const auto& [unique_key, object] : md.objects) {
    reader->ReadObject(object);
    if (native && !object.checksum) ++check.unverified_objects;  // DCP: a zip record's CRC32
    ++check.objects;
    check.bytes += object.length;
  }
  IntegrityCheck integrity = VerifyMegatronIntegrity(env, dir);
  check.integrity = integrity.present;
  check.integrity_files = integrity.files;
  return check;
}

StoredLoad LoadStored(const Scenario& spec, const std::string& dir, const std::string& topology,
                      StrictHandling strict, Communicator& comm, bool objects,
                      bool regrid_objects) {
  Env* env = Env::Default();
  StoredLoad out;
  AgreeOnOutcome(comm, [&] {
    out.topology = Topology::Parse(topology);
    if (out.topology.world_size() != comm.size()) {
      Fail(ErrorKind::kInvalidArgument, "topology {} needs {} ranks, but {} are running", topology,
           out.topology.world_size(), comm.size());
    }
    out.reader = DetectFormat(env, dir).OpenReader(env, dir);
    const CheckpointMetadata& md = out.reader->metadata();
    if (spec.optimizer || spec.check_stored_optimizer)
      CheckStoredOptimizerResumable(md.common, out.topology);
    Topology saved = md.topology.empty() ? out.topology : Topology::Parse(md.topology);
    out.request = RequestFor(spec, md, saved, out.topology, comm.rank(), /*zero_fill=*/true,
                             objects, regrid_objects ? &out.regridded : nullptr);
  });
  LoadOptions load;
  load.strict = strict;
  // A regridded object is read at its stored coordinate by the ranks that
  // need it, so the request no longer tiles its stored grid: no access check
  // (the tensors' requests come from the spec's expansion; the save checks
  // the written grid).
  if (comm.AllReduceOne(out.regridded.empty() ? 0 : 1, ReduceOp::kMax) > 0)
    load.validate_access_integrity = false;
  out.loaded = Load(out.request, dir, comm, load);
  return out;
}

ReshardResult ReshardRank(const Scenario& request_spec, const std::string& dir,
                          const std::string& topology, const std::string& out, const Format& format,
                          StrictHandling strict, Communicator& comm, bool objects,
                          bool regrid_objects) {
  Scenario spec = request_spec;  // stored dtypes: a resharded checkpoint keeps them
  for (TensorSpec& t : spec.tensors) t.load_dtype.reset();
  auto start = std::chrono::steady_clock::now();
  StoredLoad stored = LoadStored(spec, dir, topology, strict, comm, objects, regrid_objects);
  const Topology& topo = stored.topology;
  std::unique_ptr<CheckpointReader>& reader = stored.reader;
  Node& request = stored.request;
  LoadResult& loaded = stored.loaded;
  const std::map<std::string, std::pair<Shape, Shape>>& regridded = stored.regridded;
  SaveOptions save;
  save.format = &format;
  save.topology = topo.ToString();
  // What the reshard does not change (objects, the common state) is written
  // as stored, not re-encoded from its JSON value.
  Node resave = ResaveState(request, loaded.state_dict);
  save.common_record = reader->CommonRecord();
  AgreeOnOutcome(comm, [&] {
    KeepStoredRecords(resave, *reader);
    // Regridded objects (as stored, records kept) go to their new coordinate.
    auto objs = resave.as<Dict>().find("objects");
    if (objs != resave.as<Dict>().end() && objs->second.is<Dict>()) {
      for (const auto& [path, where] : regridded) {
        auto it = objs->second.as<Dict>().find(path);
        if (it == objs->second.as<Dict>().end() || !it->second.is<ShardedObject>()) continue;
        it->second.as<ShardedObject>().global_shape = where.first;
        it->second.as<ShardedObject>().global_offset = where.second;
      }
    }
    // A reshard changes no common state: the tree's common part is the
    // checkpoint's as stored, not the request spec's generated values (the
    // optimizer section's param_groups and step would replace Megatron's, a
    // tensor and tuples among them, and the record could not be kept).
    SavePieces pieces = SavePreprocess(resave);
    Node tree =
        CommonFromJson(save.common_record ? save.common_record->value : reader->metadata().common);
    Merge(tree, std::move(pieces.sharded));
    resave = std::move(tree);
  });
  SaveSummary written = Save(resave, out, comm, save);
  ReshardResult result;
  result.bytes_read = static_cast<uint64_t>(
      comm.AllReduceOne(static_cast<int64_t>(loaded.summary.bytes_read), ReduceOp::kSum));
  result.bytes_needed = static_cast<uint64_t>(
      comm.AllReduceOne(static_cast<int64_t>(loaded.summary.bytes_needed), ReduceOp::kSum));
  result.chunk_bytes = static_cast<uint64_t>(
      comm.AllReduceOne(static_cast<int64_t>(loaded.summary.chunk_bytes), ReduceOp::kSum));
  result.bytes_written = static_cast<uint64_t>(
      comm.AllReduceOne(static_cast<int64_t>(written.bytes_written), ReduceOp::kSum));
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace distckpt
