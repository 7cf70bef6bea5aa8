// One rank's part of a scenario step (runner.h SaveStep / LoadStep): build
// the rank's state or request, save or load it with the step's strategy,
// check every loaded element, and agree with every rank on the report.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "comm/nccl_communicator.h"
#include "core/error.h"
#include "engine/load.h"
#include "engine/local_checkpoint.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "engine/save_async.h"
#include "harness/expand/expand.h"
#include "harness/expand/fp8_section.h"
#include "harness/expand/resave.h"
#include "harness/run/runner.h"
#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

std::string Joined(const std::set<std::string>& keys) {
  return fmt::format("{}", fmt::join(keys, ","));
}

// Every rank contributes its error (or ""); every rank gets the same verdict.
// Errors already agreed by AgreeOnOutcome are identical on every rank and
// name the failing ranks; rank-local ones get the lowest failing rank's name.
std::string AgreeOnError(Communicator& comm, const std::string& mine) {
  std::vector<std::string> all = comm.AllGather(mine);
  auto failed =
      std::find_if(all.begin(), all.end(), [](const std::string& e) { return !e.empty(); });
  if (failed == all.end()) return "";
  bool agreed =
      std::all_of(all.begin(), all.end(), [&](const std::string& e) { return e == *failed; });
  if (agreed || all.size() == 1) return *failed;
  return fmt::format("rank {}: {}", failed - all.begin(), *failed);
}

uint64_t Sum(Communicator& comm, uint64_t value) {
  return static_cast<uint64_t>(comm.AllReduceOne(static_cast<int64_t>(value), ReduceOp::kSum));
}

double Max(Communicator& comm, double seconds) {
  return comm.AllReduceOne(static_cast<int64_t>(seconds * 1e6), ReduceOp::kMax) / 1e6;
}

Topology WorldTopology(const std::string& text, Communicator& comm) {
  Topology topo = Topology::Parse(text);
  if (topo.world_size() != comm.size()) {
    Fail(ErrorKind::kInvalidArgument, "topology {} needs {} ranks, but {} are running", text,
         topo.world_size(), comm.size());
  }
  return topo;
}

// Megatron's DP-with-CP group: the ranks sharing this rank's tp and pp.
std::unique_ptr<Communicator> DataParallelGroup(const Topology& topo, Communicator& comm) {
  RankCoords coords = topo.Coords(comm.rank());
  coords.dp = coords.cp = 0;
  return comm.Split(topo.RankOf(coords), comm.rank());
}

// The rank's device for --device: "cuda" puts rank r on device r mod the
// visible devices.
Device RankDevice(const std::string& device, int rank) {
  if (device != "cuda") return Device::Parse(device);
  const int count = CudaDeviceCount();
  return Device::Cuda(count > 0 ? rank % count : 0);
}

// A save state whose ShardedTensors' data live on `device`.
Node OnDevice(Node state, const Device& device) {
  if (device.is_cpu()) return state;
  ForEachLeaf(state, [&](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) t->data = t->data.To(device);
  });
  return state;
}

// A load request whose ShardedTensors land in new tensors on `device`.
Node DestinationsOn(Node request, const Device& device) {
  if (device.is_cpu()) return request;
  ForEachLeaf(request, [&](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      t->data = Tensor::Empty(t->dtype, t->DataShape(), device);
    }
  });
  return request;
}

// The loaded state with every device tensor copied to the host.
Node OnHost(Node state) {
  ForEachLeaf(state, [&](const NodePath&, Node& leaf) {
    if (Tensor* t = leaf.get_if<Tensor>(); t && t->on_cuda()) *t = t->To(Device::Cpu());
  });
  return state;
}

LocalOptions LocalOptionsOf(const StepOptions& step, int world) {
  return {step.local_dir, step.env, Cliques(world, step.replication)};
}

SaveSummary SaveWithStrategy(const Node& state, const std::string& dir, Communicator& comm,
                             const Topology& topo, SaveOptions options, const StepOptions& step) {
  if (!step.local_dir.empty()) {
    return SaveLocal(state, kNextLocalIteration, comm, LocalOptionsOf(step, comm.size()));
  }
  options.strategy = step.save;
  std::unique_ptr<Communicator> dp;
  if (step.save.kind != SaveStrategy::Kind::kPlain) {
    dp = DataParallelGroup(topo, comm);
    options.strategy.group = dp.get();
  }
  if (!step.async) return Save(state, dir, comm, options);
  AsyncCallsQueue queue(comm);
  AsyncSave save = SaveAsync(state, dir, comm, options);
  queue.Schedule(save.request);
  queue.MaybeFinalize(/*blocking=*/true);
  return *save.summary;
}

}  // namespace

nlohmann::json StepReport::ToJson() const {
  return {{"ok", ok},
          {"value_mismatch", value_mismatch},
          {"other_exception", other_exception},
          {"error", error},
          {"bytes_written", bytes_written},
          {"bytes_needed", bytes_needed},
          {"bytes_read", bytes_read},
          {"chunks_verified", chunks_verified},
          {"chunks_unverified", chunks_unverified},
          {"seconds", seconds},
          {"missing", missing},
          {"unexpected", unexpected},
          {"rank_bytes_read", rank_bytes_read},
          {"rank_chunk_bytes", rank_chunk_bytes},
          {"rank_bytes_written", rank_bytes_written},
          {"blocking_seconds", blocking_seconds},
          {"fp8_saturated", fp8_saturated}};
}

StepReport StepReport::FromJson(const nlohmann::json& j) {
  StepReport r;
  r.ok = j.at("ok").get<bool>();
  r.value_mismatch = j.at("value_mismatch").get<bool>();
  r.other_exception = j.value("other_exception", false);
  r.error = j.at("error").get<std::string>();
  r.bytes_written = j.at("bytes_written").get<uint64_t>();
  r.bytes_needed = j.at("bytes_needed").get<uint64_t>();
  r.bytes_read = j.at("bytes_read").get<uint64_t>();
  r.chunks_verified = j.at("chunks_verified").get<uint64_t>();
  r.chunks_unverified = j.at("chunks_unverified").get<uint64_t>();
  r.seconds = j.at("seconds").get<double>();
  r.missing = j.at("missing").get<std::string>();
  r.unexpected = j.at("unexpected").get<std::string>();
  r.rank_bytes_read = j.at("rank_bytes_read").get<std::vector<uint64_t>>();
  r.rank_chunk_bytes = j.at("rank_chunk_bytes").get<std::vector<uint64_t>>();
  r.rank_bytes_written = j.value("rank_bytes_written", std::vector<uint64_t>{});
  r.blocking_seconds = j.value("blocking_seconds", 0.0);
  r.fp8_saturated = j.value("fp8_saturated", std::map<std::string, int64_t>{});
  return r;
}

StepReport SaveStep(const Scenario& s, const PairSpec* pair, const std::string& topology,
                    const std::string& dir, Communicator& comm, const Format* format,
                    const StepOptions& step) {
  StepReport r;
  std::string error;
  SaveSummary summary;
  try {
    Topology topo = WorldTopology(topology, comm);
    Node state;
    AgreeOnOutcome(comm, [&] {
      state = OnDevice(BuildSaveState(s, pair, topo, comm.rank()),
                       RankDevice(step.device, comm.rank()));
    });
    SaveOptions options;
    options.format = format;
    options.topology = topo.ToString();
    options.env = step.env;
    options.overwrite = step.overwrite;
    summary = SaveWithStrategy(state, dir, comm, topo, options, step);
  } catch (const std::exception& e) {
    error = e.what();
  }
  r.error = AgreeOnError(comm, error);
  r.ok = r.error.empty();
  r.bytes_written = Sum(comm, summary.bytes_written);
  r.seconds = Max(comm, summary.seconds);
  r.blocking_seconds = Max(comm, summary.blocking_seconds);
  for (const std::string& bytes : comm.AllGather(std::to_string(summary.bytes_written))) {
    r.rank_bytes_written.push_back(std::stoull(bytes));
  }
  return r;
}

StepReport LoadStep(const Scenario& s, const PairSpec* pair, const std::string& saved_topology,
                    const std::string& topology, const std::string& dir, Communicator& comm,
                    StrictHandling strict, VerifyPolicy verify, const StepOptions& step) {
  StepReport r;
  std::string error;
  bool mismatch = false;
  LoadResult result;
  Fp8Check fp8;
  bool other = false;
  Topology topo;
  Node request, as_loaded;  // as_loaded: the loaded state before the fp8 checks convert it
  try {
    Topology saved = Topology::Parse(saved_topology);
    topo = WorldTopology(topology, comm);
    // Opened once: the optimizer check reads its common state, the load its chunks.
    std::unique_ptr<CheckpointReader> reader;
    AgreeOnOutcome(comm, [&] {
      if (s.optimizer) {
        reader = OpenCheckpoint(dir, step.env);
        CheckOptimizerLoadable(s, LoadCommonStateDict(*reader), topo);
      }
      request = BuildLoadRequest(s, pair, saved, topo, comm.rank());
    });
    Node destinations;
    AgreeOnOutcome(comm, [&] {
      destinations = DestinationsOn(request, RankDevice(step.device, comm.rank()));
    });
    LoadOptions options;
    options.strict = strict;
    options.verify = verify;
    options.env = step.env;
    options.strategy = step.load;
    std::unique_ptr<Communicator> dp;
    if (step.load.kind != LoadStrategy::Kind::kPlain) {
      dp = DataParallelGroup(topo, comm);
      if (step.nccl) {
        dp = CreateNcclCommunicator(std::shared_ptr<Communicator>(std::move(dp)),
                                    RankDevice(step.device, comm.rank()));
      }
      options.strategy.group = dp.get();
    }
    if (step.local_dir.empty()) {
      result = reader ? Load(destinations, *reader, comm, options)
                      : Load(destinations, dir, comm, options);
    } else {
      LocalLoadResult local = LoadLocal(destinations, comm, LocalOptionsOf(step, comm.size()));
      result.state_dict = std::move(local.state_dict);
      result.summary = local.summary;
    }
    result.state_dict = OnHost(std::move(result.state_dict));
    std::optional<std::string> bad = CheckLoaded(s, pair, saved, topo, comm.rank(), result);
    if (!step.resave_dir.empty()) as_loaded = result.state_dict;
    if (!s.fp8.empty()) {
      fp8 = CheckFp8Loaded(s, pair, topo, comm.rank(), result.state_dict);
      if (!bad) bad = fp8.error;
    }
    if (bad) {
      error = *bad;
      mismatch = true;
    }
  } catch (const CheckpointError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = e.what();
    other = true;
  }
  r.error = AgreeOnError(comm, error);
  r.ok = r.error.empty();
  r.value_mismatch = Sum(comm, mismatch ? 1 : 0) > 0;
  r.other_exception = Sum(comm, other ? 1 : 0) > 0;
  if (r.ok && !step.resave_dir.empty()) {  // every rank: the verdict is agreed
    std::string resave_error;
    try {
      SaveOptions options;
      options.topology = topo.ToString();
      Save(ResaveState(request, as_loaded), step.resave_dir, comm, options);
    } catch (const std::exception& e) {
      resave_error = e.what();
    }
    resave_error = AgreeOnError(comm, resave_error);
    if (!resave_error.empty()) {
      r.ok = false;
      r.error = "resave: " + resave_error;
    }
  }
  if (!s.fp8.empty()) {  // every rank has the same fp8 keys: the same collectives
    fp8.saturated.resize(s.fp8.size());
    std::vector<int64_t> totals;
    for (int64_t n : fp8.saturated) totals.push_back(comm.AllReduceOne(n, ReduceOp::kSum));
    for (size_t i = 0; i < totals.size(); ++i) r.fp8_saturated[s.fp8[i].tensor.key] = totals[i];
    std::optional<std::string> bad = r.ok ? CheckFp8Saturation(s, totals) : std::nullopt;
    if (bad) {
      r.ok = false;
      r.error = *bad;
      r.value_mismatch = true;
    }
  }
  const LoadSummary& sum = result.summary;
  r.bytes_needed = Sum(comm, sum.bytes_needed);
  r.bytes_read = Sum(comm, sum.bytes_read);
  r.chunks_verified = Sum(comm, sum.chunks_verified);
  r.chunks_unverified = Sum(comm, sum.chunks_unverified);
  r.seconds = Max(comm, sum.seconds);
  for (const std::string& s :
       comm.AllGather(nlohmann::json{sum.bytes_read, sum.chunk_bytes}.dump())) {
    nlohmann::json pair = nlohmann::json::parse(s);
    r.rank_bytes_read.push_back(pair[0].get<uint64_t>());
    r.rank_chunk_bytes.push_back(pair[1].get<uint64_t>());
  }
  // Missing keys are global; unexpected keys per rank: report rank 0's view.
  r.missing = Joined(result.mismatch.missing);
  r.unexpected = Joined(result.mismatch.unexpected);
  comm.Broadcast(r.missing, 0);
  comm.Broadcast(r.unexpected, 0);
  return r;
}

}  // namespace distckpt
