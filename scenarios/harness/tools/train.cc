#include "harness/tools/train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "core/error.h"
#include "engine/common_state.h"
#include "harness/expand/expand.h"
#include "harness/tools/request_spec.h"
#include "harness/tools/verify.h"
#include "manager/layout.h"
#include "manager/tracker.h"
#include "mapping/dict_utils.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer.exp_avg.";

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t CountElements(const Node& tree) {
  uint64_t n = 0;
  ForEachLeaf(tree, [&](const NodePath&, const Node& leaf) {
    if (const Tensor* t = leaf.get_if<Tensor>()) n += static_cast<uint64_t>(t->numel());
  });
  return n;
}

std::string AgreeOnError(Communicator& comm, const std::string& mine) {
  for (const std::string& e : comm.AllGather(mine)) {
    if (!e.empty()) return e;
  }
  return "";
}

const Node* Child(const Node& n, const std::string& k) {
  const Dict* d = n.get_if<Dict>();
  if (!d) return nullptr;
  auto it = d->find(k);
  return it == d->end() ? nullptr : &it->second;
}

// Checks one loaded content of `component` against its state at `step`.
std::optional<std::string> CheckContent(const Scenario& s, int64_t step,
                                        const std::string& component, const std::string& content,
                                        const Topology& saved, const Topology& topo, int rank,
                                        const LoadResult& result, uint64_t& elements) {
  const Node* got = Child(result.state_dict, content);
  if (!got) return fmt::format("content '{}' missing from the loaded state", content);
  if (content == "extra") {
    nlohmann::json want = ExtraStateAt(s, step, component);
    nlohmann::json have = CommonToJson(*got);
    if (have != want) {
      return fmt::format("extra state of '{}': expected {}, got {}", component, want.dump(),
                         have.dump());
    }
    return std::nullopt;
  }
  Scenario at = StepScenario(s, step, component, content);
  LoadResult part;
  part.state_dict = *got;
  part.mismatch = result.mismatch;
  elements += CountElements(*got);
  if (auto bad = CheckLoaded(at, nullptr, saved, topo, rank, part)) {
    return fmt::format("component '{}' {} at step {}: {}", component, content, step, *bad);
  }
  return std::nullopt;
}

}  // namespace

uint64_t StepSeed(uint64_t seed, int64_t step, const std::string& component) {
  // 53 bits: exact in any JSON reader of the common state.
  return Mix(seed ^ Mix(static_cast<uint64_t>(step)) ^ (KeyHash(component) << 1)) &
         ((1ULL << 53) - 1);
}

Scenario StepScenario(const Scenario& base, int64_t step, const std::string& component,
                      const std::string& content) {
  Scenario s = base;
  s.pairs.clear();
  s.seed = StepSeed(base.seed, step, component);
  if (content == "optimizer") {
    s.seed = Mix(s.seed ^ 0x6f70);
    s.optimizer.reset();
    s.fp8.clear();
    for (TensorSpec& t : s.tensors) t.key = kOptimizerPrefix + t.key;
    for (ObjectSpec& o : s.objects) o.key = kOptimizerPrefix + o.key;
    for (GptConfig& m : s.models) m.prefix = kOptimizerPrefix + m.prefix;
  } else if (content != "model") {
    Fail(ErrorKind::kInvalidArgument, "train: unknown content '{}' (model, optimizer, extra)",
         content);
  }
  return s;
}

nlohmann::json ExtraStateAt(const Scenario& s, int64_t step, const std::string& component) {
  const int64_t global_batch = 32;
  return {{"iteration", step},
          {"component", component},
          {"lr_scheduler", {{"num_steps", step * global_batch}, {"lr", 1e-3 / (1.0 + step)}}},
          {"dataloader", {{"consumed_samples", step * global_batch}}},
          {"rng", {{"seed", StepSeed(s.seed, step, component)}}}};
}

namespace {

// A resume point another tool wrote (Megatron's training loop): its model is
// the checkpoint's, not the scenario's, so it is loaded whole under this
// run's topology as Megatron's load_checkpoint would (the request inferred
// from the checkpoint, its refusals first), and the loop stops there: its
// steps would save the scenario's model into another framework's run, which
// Megatron could not resume. `--steps` at the iteration checks the resume
// alone (exit 0); past it, report.error says why nothing was trained.
void ResumeForeign(const ResumePoint& point, const TrainOptions& options, Communicator& comm,
                   TrainReport& report, const std::function<void(const std::string&)>& log) {
  report.resumed_dir = point.dir;
  report.resumed_foreign = true;
  report.resumed_iteration = report.last_step = point.iteration;
  std::string error;
  try {
    if (point.remote) {
      Fail(ErrorKind::kUnsupported,
           "{} (in the upload root) was written by another tool: train resumes such a "
           "checkpoint from a local root only (copy it there)",
           point.dir);
    }
    if (options.manager.layout != CheckpointLayout::kMegatron) {
      Fail(ErrorKind::kUnsupported,
           "{} was written by another tool (verl): train resumes only Megatron-written "
           "iterations; `distckpt reshard {} --world-size N` reshards verl's FSDP files",
           point.dir, point.dir);
    }
    Scenario spec;
    AgreeOnOutcome(comm, [&] {
      Env* env = Env::Default();
      std::unique_ptr<CheckpointReader> reader =
          DetectFormat(env, point.dir).OpenReader(env, point.dir);
      spec = LoadRequestSpec("gpt", reader->metadata(), {});
    });
    StoredLoad stored = LoadStored(spec, point.dir, options.manager.topology,
                                   StrictHandling::kAssumeOkUnexpected, comm);
    uint64_t elements = 0;
    ForEachLeaf(stored.loaded.state_dict, [&](const NodePath&, const Node& leaf) {
      if (const Tensor* t = leaf.get_if<Tensor>()) elements += static_cast<uint64_t>(t->numel());
    });
    report.elements_checked =
        static_cast<uint64_t>(comm.AllReduceOne(static_cast<int64_t>(elements), ReduceOp::kSum));
    const uint64_t bytes = static_cast<uint64_t>(
        comm.AllReduceOne(static_cast<int64_t>(stored.loaded.summary.bytes_read), ReduceOp::kSum));
    // What the inferred request leaves out (Megatron's dp_reshardable
    // optimizer buckets, which --spec gpt does not model) is said, not hidden.
    std::set<std::string> stored_keys;
    for (const auto& [key, t] : stored.reader->metadata().tensors) stored_keys.insert(key);
    const size_t stored_count = stored_keys.size();
    ForEachLeaf(stored.request, [&](const NodePath&, const Node& leaf) {
      if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) stored_keys.erase(t->key);
      if (const ShardedTensorFactory* f = leaf.get_if<ShardedTensorFactory>()) {
        ForEachLeaf(f->Build(), [&](const NodePath&, const Node& built) {
          if (const ShardedTensor* t = built.get_if<ShardedTensor>()) stored_keys.erase(t->key);
        });
      }
    });
    // Each rank requests its own pieces: a key is left out when every rank leaves it out.
    const std::vector<std::string> left =
        comm.AllGather(fmt::format("{}", fmt::join(stored_keys, "\n")));
    std::erase_if(stored_keys, [&](const std::string& key) {
      return std::any_of(left.begin(), left.end(), [&](const std::string& mine) {
        return ("\n" + mine + "\n").find("\n" + key + "\n") == std::string::npos;
      });
    });
    report.resumed = true;
    log(fmt::format(
        "resumed iteration {} from {} (written by another tool: Megatron's training loop) under "
        "{}: {} elements, {} bytes read, {}",
        point.iteration, point.dir, options.manager.topology, report.elements_checked, bytes,
        stored_keys.empty() ? "every stored tensor placed"
                            : fmt::format("{} of {} stored tensors placed",
                                          stored_count - stored_keys.size(), stored_count)));
    if (!stored_keys.empty()) {
      log(
          fmt::format("warning: not loaded (the request inferred from the checkpoint does not hold "
                      "them): {}",
                      fmt::join(stored_keys, ", ")));
    }
    if (options.steps > point.iteration) {
      Fail(ErrorKind::kUnsupported,
           "iteration {} of {} is another framework's model: this simulated loop would save its "
           "own scenario into that run, which Megatron could not resume; nothing was trained or "
           "written (--steps {} checks the resume alone; `distckpt reshard {} --topology {} "
           "--out NEW` gives Megatron the run under this topology)",
           point.iteration, options.manager.root, point.iteration, options.manager.root,
           options.manager.topology);
    }
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  report.error = AgreeOnError(comm, error);
}

}  // namespace

TrainReport TrainLoop(const Scenario& s, const TrainOptions& options, Communicator& comm) {
  TrainReport report;
  auto log = [&](const std::string& line) {
    if (comm.rank() == 0 && options.log) options.log(line);
  };
  const Topology topo = Topology::Parse(options.manager.topology);
  if (topo.world_size() != comm.size()) {
    Fail(ErrorKind::kInvalidArgument, "topology {} needs {} ranks, but {} are running",
         options.manager.topology, topo.world_size(), comm.size());
  }
  if (options.save_interval <= 0 || options.steps < 0 || options.non_persistent_interval < 0) {
    Fail(ErrorKind::kInvalidArgument,
         "train: --steps must be >= 0, --save-interval > 0 and --non-persistent-save-interval "
         ">= 0");
  }
  CheckpointManager manager(options.manager, comm);
  const std::vector<std::string>& components = manager.options().components;
  // ROOT/non_persistent: when saving there, or to resume from it ("auto"
  // takes it when newer). Ranks agree whether it holds a tracker.
  std::unique_ptr<CheckpointManager> transient;
  {
    ManagerOptions np = options.manager;
    np.root = JoinPath(options.manager.root, kNonPersistentDir);
    np.transient = true;
    np.retention = {};
    np.upload = {};  // non-persistent checkpoints stay local (Megatron's too)
    bool wanted = options.non_persistent_interval > 0;
    if (!wanted && options.resume == "auto") {
      Env* env = np.save.env ? np.save.env : Env::Default();
      wanted = comm.AllReduceOne(env->FileExists(TrackerPath(np.root)) ? 1 : 0, ReduceOp::kMax) > 0;
    }
    if (wanted) transient = std::make_unique<CheckpointManager>(std::move(np), comm);
  }
  int64_t start = 0;
  std::string error;
  bool mismatch = false;
  if (!options.resume.empty()) {
    ResumePoint point = manager.Resume(options.resume);
    CheckpointManager* from = &manager;
    if (transient && options.resume == "auto") {
      ResumePoint np = transient->Resume("auto");
      for (const std::string& w : np.warnings) log("warning: " + w);
      point.ignored.insert(point.ignored.end(), np.ignored.begin(), np.ignored.end());
      if (np.found && (!point.found || np.iteration >= point.iteration)) {
        if (point.found) {
          log(fmt::format("non-persistent iteration {} is not older than iteration {}: resuming it",
                          np.iteration, point.iteration));
        }
        np.ignored = point.ignored;
        np.warnings.insert(np.warnings.begin(), point.warnings.begin(), point.warnings.end());
        point = std::move(np);
        from = transient.get();
        report.resumed_non_persistent = true;
      }
    }
    report.ignored = point.ignored;
    for (const std::string& w : point.warnings) log("warning: " + w);
    if (point.found && point.foreign) {
      ResumeForeign(point, options, comm, report, log);
      return report;
    }
    if (point.found) {
      report.resumed = true;
      report.resumed_iteration = start = point.iteration;
      report.resumed_dir = point.dir;
      report.saved_topology = point.manifest.topology;
      Topology saved = Topology::Parse(point.manifest.topology);
      uint64_t elements = 0;
      for (const std::string& component : components) {
        Dict request;
        for (const std::string& content : options.load_contents) {
          if (content == "extra") {
            request[content] = Node(Dict{});
          } else {
            request[content] = BuildLoadRequest(StepScenario(s, start, component, content), nullptr,
                                                saved, topo, comm.rank());
          }
        }
        LoadResult result =
            from->Load(point, component, Node(std::move(request)), options.load_contents);
        for (const std::string& content : options.load_contents) {
          if (!error.empty()) break;
          if (auto bad = CheckContent(s, start, component, content, saved, topo, comm.rank(),
                                      result, elements)) {
            error = *bad;
            mismatch = true;
          }
        }
      }
      error = AgreeOnError(comm, error);
      report.elements_checked =
          static_cast<uint64_t>(comm.AllReduceOne(static_cast<int64_t>(elements), ReduceOp::kSum));
      if (!error.empty()) {
        report.error = error;
        report.value_mismatch = comm.AllReduceOne(mismatch ? 1 : 0, ReduceOp::kMax) > 0;
        return report;
      }
      log(fmt::format("resumed iteration {} from {} (saved under {}, now {}): {} elements checked",
                      start, point.dir, point.manifest.topology, options.manager.topology,
                      report.elements_checked));
    } else {
      log("no checkpoint to resume: starting at step 0");
    }
    for (const std::string& why : point.ignored) log("ignored incomplete checkpoint " + why);
  }
  auto upload_log = [&] {
    for (const std::string& line : manager.TakeUploadLog()) log(line);
  };
  auto finalize = [&](bool blocking) {
    for (int64_t it : manager.Finalize(blocking)) {
      report.committed.push_back(it);
      log(fmt::format("committed {}", it));
    }
    upload_log();
    if (!transient) return;
    for (int64_t it : transient->Finalize(blocking)) {
      report.committed_non_persistent.push_back(it);
      log(fmt::format("committed non-persistent {}", it));
    }
  };
  for (int64_t step = start + 1; step <= options.steps; ++step) {
    if (options.step_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options.step_ms));
    report.last_step = step;
    finalize(false);
    // Every rank issues this all-reduce at every step, whatever it saw.
    const int stop =
        options.stop_requested
            ? static_cast<int>(comm.AllReduceOne(options.stop_requested(), ReduceOp::kMax))
            : 0;
    const bool regular = step % options.save_interval == 0 ||
                         (options.save_last && step == options.steps) || stop != 0;
    const bool non_persistent = !regular && options.non_persistent_interval > 0 &&
                                step % options.non_persistent_interval == 0;
    if (stop != 0) log(fmt::format("stop requested (signal {}) at step {}: saving", stop, step));
    if (regular || non_persistent) {
      CheckpointManager& target = non_persistent ? *transient : manager;
      IterationState state;
      for (const std::string& component : components) {
        for (const std::string& content : options.manager.save_contents) {
          if (content == "extra") {
            state[component][content] = CommonFromJson(ExtraStateAt(s, step, component));
          } else {
            state[component][content] = BuildSaveState(StepScenario(s, step, component, content),
                                                       nullptr, topo, comm.rank());
          }
        }
      }
      log(fmt::format("saving {}{}", non_persistent ? "non-persistent " : "", step));
      try {
        target.Save(step, state);
      } catch (const CheckpointError& e) {  // every rank's (the save agrees on its outcome)
        // An earlier async save still pending may be what failed first (a full
        // disk fails its writes, then this save's first write): its error is
        // the one to report, with this one after it.
        if (target.pending() == 0) throw;
        try {
          target.Finalize(true);
        } catch (const CheckpointError& earlier) {
          throw CheckpointError(earlier.kind(),
                                fmt::format("{} (then the save of iteration {} failed too: {})",
                                            earlier.what(), step, e.what()));
        }
        throw;
      }
      if (!options.manager.async) {
        (non_persistent ? report.committed_non_persistent : report.committed).push_back(step);
        log(fmt::format("committed {}{}", non_persistent ? "non-persistent " : "", step));
      }
    }
    if (stop != 0) {
      report.stop_signal = stop;
      break;
    }
  }
  finalize(true);
  report.last_step = std::max(report.last_step, start);
  if (options.manager.upload.env) {  // rank 0 uploads: every rank gets its verdict
    const std::string why = manager.WaitUploads();
    upload_log();
    report.uploaded = manager.Uploaded();
    report.error = AgreeOnError(comm, why);
  }
  return report;
}

}  // namespace distckpt
