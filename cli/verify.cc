// distckpt verify / reshard: a request spec checked against, or loaded from,
// an existing checkpoint (harness/verify.h).
#include "harness/verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "format/dcp/megatron_files.h"
#include "format/format.h"
#include "format/verl/verl_megatron.h"
#include "harness/request_spec.h"
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/tracker.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace distckpt {
namespace {

Scenario SpecOf(const std::string& dir, const std::string& spec,
                const std::vector<std::string>& sets) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  CheckpointMetadata md = reader->metadata();
  AddVerlMegatronArgs(env, dir, md);  // verl's dist_ckpt: its transformer_config.json
  return LoadRequestSpec(spec, md, ParseSpecOverrides(sets));
}

StrictHandling StrictOf(const std::string& flag, const Scenario& spec) {
  return flag.empty() ? spec.strict : ParseStrictHandling(flag);
}

// "  object rng_state: regridded: ..." for each stored object a topology does
// not keep; the number of them.
int PrintObjectFates(const std::vector<ObjectFate>& fates) {
  int changed = 0;
  for (const ObjectFate& f : fates) {
    if (f.fate == "kept") continue;
    ++changed;
    std::cout << fmt::format("  object {}: {}: {}\n", f.key, f.fate, f.detail);
  }
  return changed;
}

nlohmann::json FatesJson(const std::vector<ObjectFate>& fates) {
  nlohmann::json out = nlohmann::json::array();
  for (const ObjectFate& f : fates)
    out.push_back({{"key", f.key}, {"fate", f.fate}, {"detail", f.detail}});
  return out;
}

}  // namespace

int VerifyCommand(const VerifyArgs& args) {
  Scenario spec = SpecOf(args.dir, args.spec, args.sets);
  if (args.spec == "gpt") {
    std::cout << "spec gpt inferred: " << spec.ToJson().at("model").dump() << "\n";
  }
  VerifyOptions options;
  options.strict = StrictOf(args.strict, spec);
  options.saved_topology = args.saved_topology;
  for (const std::string& t : args.topologies) Topology::Parse(t);  // bad input before any verdict
  Report report;
  report.command = "verify";
  report.title = fmt::format("{} with spec {}", args.dir, args.spec);
  for (const std::string& t : args.topologies) {
    VerifyResult r = VerifyLoad(spec, args.dir, t, options);
    std::string note = r.ok ? fmt::format(
                                  "{} ranks, {} tensor and {} object requests, {} bytes "
                                  "would be read",
                                  r.ranks, r.tensors, r.objects, r.bytes_needed)
                            : r.error;
    if (r.ok && !r.missing.empty()) note += "; missing keys: " + r.missing;
    if (r.ok && !r.unexpected.empty()) note += "; unexpected keys: " + r.unexpected;
    if (r.ok) {
      std::cout << fmt::format("verify {} under {}: loads ({}; metadata only, {:.3f} s)\n",
                               args.dir, t, note, r.seconds);
    } else {
      std::cout << fmt::format("verify {} under {}: WOULD NOT LOAD: {}\n", args.dir, t, r.error);
    }
    for (const std::string& w : r.warnings) std::cout << "  warning: " << w << "\n";
    const int changed = PrintObjectFates(r.objects_fate);
    bool ok = r.ok;
    if (changed > 0) {
      note += fmt::format("; {} stored object(s) not carried:", changed);
      for (const ObjectFate& f : r.objects_fate)
        if (f.fate != "kept") note += fmt::format(" {} ({})", f.key, f.fate);
      if (args.strict_objects) {
        ok = false;
        std::cout << fmt::format("verify {} under {}: FAILS --strict-objects: {} object(s)\n",
                                 args.dir, t, changed);
      }
    }
    report.cases.push_back({"distckpt.verify",
                            t,
                            ok,
                            note,
                            r.seconds,
                            {{"ranks", r.ranks},
                             {"tensors", r.tensors},
                             {"objects", r.objects},
                             {"bytes_needed", r.bytes_needed},
                             {"missing", r.missing},
                             {"unexpected", r.unexpected},
                             {"stored_objects", FatesJson(r.objects_fate)}}});
  }
  if (args.data) {
    DataCheck data = VerifyData(args.dir);  // damage: CheckpointError naming file and key
    std::string note;
    if (data.verified()) {
      note = "every checksum matches";
    } else {
      // Bytes without a checksum are read, but wrong ones would pass: never "matches".
      std::vector<std::string> parts;
      if (data.unverified_chunks) parts.push_back(fmt::format("{} chunks", data.unverified_chunks));
      if (data.unverified_objects) {
        parts.push_back(fmt::format("{} objects", data.unverified_objects));
      }
      if (data.unverified_metadata) parts.push_back("metadata.json");
      note = fmt::format(
          "UNVERIFIED: {} carry no checksum (their bytes cannot be told from damaged ones); "
          "the checksums present match",
          fmt::join(parts, ", "));
      if (args.require_checksums) note += " (--require-checksums: fails)";
    }
    if (data.integrity) {
      note += fmt::format("; integrity.json: {} files match their SHA-256", data.integrity_files);
    }
    std::cout << fmt::format("verify --data {}: {} chunks and {} objects, {} bytes read, {}\n",
                             args.dir, data.chunks, data.objects, data.bytes, note);
    report.cases.push_back({"distckpt.verify",
                            "data",
                            data.verified() || !args.require_checksums,
                            fmt::format("{} chunks, {} objects, {} bytes: {}", data.chunks,
                                        data.objects, data.bytes, note),
                            0,
                            {{"chunks", data.chunks},
                             {"bytes", data.bytes},
                             {"unverified_chunks", data.unverified_chunks},
                             {"unverified_objects", data.unverified_objects},
                             {"unverified_metadata", data.unverified_metadata},
                             {"integrity_files", data.integrity_files}}});
  }
  WriteReports(args.reports, report);
  return report.failures() == 0 ? kExitOk : kExitVerdictFailed;
}

namespace {

// A run root (Megatron's ROOT with latest_checkpointed_iteration.txt) given
// to reshard: the tracker's iteration is resharded into OUT/<its directory>
// and OUT gets a tracker naming it, so Megatron's --load OUT resumes there.
struct RootReshard {
  std::string out_root;
  Tracker tracker;
};

std::optional<RootReshard> ResolveRoot(ReshardArgs& args) {
  Env* env = Env::Default();
  const std::optional<std::string> tracked = TrackedIterationDir(env, args.dir);
  if (!tracked) return std::nullopt;
  const std::string name = std::filesystem::path(*tracked).filename().string();
  if (env->IsDirectory(args.out) && !env->ListDir(args.out).empty()) {
    Fail(ErrorKind::kInvalidArgument,
         "reshard of the run root {}: --out {} is not empty; a root-level reshard writes {} and a "
         "tracker into a new root",
         args.dir, args.out, name);
  }
  RootReshard root{args.out, *ReadTracker(env, args.dir)};
  args.dir = *tracked;
  args.out = JoinPath(args.out, name);
  return root;
}

// verl's Megatron checkpoint given as a step folder (global_step_N) or its
// component (actor/): the component's dist_ckpt is resharded into
// OUT[/<component>]/dist_ckpt; the component's other files (huggingface/,
// transformer_config.json with the new TP / PP sizes) and the step's files
// (data.pt) are copied beside it, so verl's load_checkpoint reads OUT.
struct VerlMegatronReshard {
  std::string component, out_component, step, out_step;
};

std::optional<VerlMegatronReshard> ResolveVerlMegatron(ReshardArgs& args) {
  Env* env = Env::Default();
  VerlMegatronReshard v;
  const std::optional<std::string> dist = VerlMegatronDistCkpt(env, args.dir, &v.component);
  if (!dist) return std::nullopt;
  if (env->IsDirectory(args.out) && !env->ListDir(args.out).empty()) {
    Fail(ErrorKind::kInvalidArgument,
         "reshard of verl's Megatron checkpoint {}: --out {} is not empty (the step or component "
         "folder is written whole, nothing is replaced)",
         args.dir, args.out);
  }
  if (v.component == args.dir) {
    v.out_component = args.out;
  } else {
    v.step = args.dir;
    v.out_step = args.out;
    v.out_component = JoinPath(args.out, std::filesystem::path(v.component).filename().string());
  }
  args.dir = *dist;
  args.out = JoinPath(v.out_component, kVerlDistCkptDir);
  return v;
}

void FinishVerlMegatron(const VerlMegatronReshard& v, const Topology& topo) {
  namespace fs = std::filesystem;
  // The engine's save lock beside dist_ckpt/ (io/file_lock.h): the save is
  // over, and verl's folder holds no such file.
  std::error_code ignored;
  fs::remove(JoinPath(v.out_component, std::string(kVerlDistCkptDir) + ".lock"), ignored);
  for (const fs::directory_entry& e : fs::directory_iterator(v.component)) {
    if (e.path().filename() == kVerlDistCkptDir) continue;
    fs::copy(e.path(), fs::path(v.out_component) / e.path().filename(),
             fs::copy_options::recursive);
  }
  const std::string tc = JoinPath(v.out_component, kVerlTransformerConfig);
  if (fs::exists(tc)) {
    nlohmann::json j = ParseJson(ReadFileToString(Env::Default(), tc), tc);
    if (j.is_object()) {
      j["tensor_model_parallel_size"] = topo.tp;
      j["pipeline_model_parallel_size"] = topo.pp;
      std::ofstream(tc, std::ios::trunc) << j.dump(2) << "\n";
    }
  }
  if (!v.step.empty()) {
    for (const fs::directory_entry& e : fs::directory_iterator(v.step)) {
      const std::string name = e.path().filename().string();
      if (e.path() == fs::path(v.component)) continue;
      if (e.is_directory()) {
        std::cout << fmt::format("  not carried: verl component {} (reshard carries {})\n", name,
                                 fs::path(v.component).filename().string());
        continue;
      }
      fs::copy(e.path(), fs::path(v.out_step) / name);
    }
  }
}

}  // namespace

int ReshardCommand(const ReshardArgs& given) {
  ReshardArgs args = given;
  std::optional<RootReshard> root = ResolveRoot(args);
  std::optional<VerlMegatronReshard> verl = ResolveVerlMegatron(args);
  if (args.format.empty()) {
    // The source's own format: Megatron resumes what it wrote (common.pt or not).
    Env* env = Env::Default();
    args.format = std::string(DetectFormat(env, args.dir).name());
    if (args.format == "dcp" && env->FileExists(JoinPath(args.dir, "common.pt")))
      args.format = "dcp-common-pt";
  }
  Scenario spec = SpecOf(args.dir, args.spec, args.sets);
  StrictHandling strict = StrictOf(args.strict, spec);
  const Format& format = FormatByName(args.format);
  const int world = Topology::Parse(args.topology).world_size();
  {
    Env* env = Env::Default();
    std::unique_ptr<CheckpointReader> reader =
        DetectFormat(env, args.dir).OpenReader(env, args.dir);
    std::vector<ObjectFate> fates =
        ObjectFates(spec, reader->metadata(), Topology::Parse(args.topology), verl.has_value());
    int changed = PrintObjectFates(fates);
    // Stored tensors the request does not hold (Megatron 0.20's dp_reshardable
    // optimizer buckets under --spec gpt, keys a spec file leaves out).
    VerifyOptions metadata_only;
    metadata_only.strict = StrictHandling::kReturnAll;
    VerifyResult plan = VerifyLoad(spec, args.dir, args.topology, metadata_only);
    if (verl) {  // carried regridded (fates above)
      for (const ObjectFate& f : fates) {
        if (f.fate != "regridded") continue;
        std::vector<std::string> keys;
        std::stringstream in(plan.missing);
        for (std::string k; std::getline(in, k, ',');) {
          if (k != f.key) keys.push_back(std::move(k));
        }
        plan.missing = fmt::format("{}", fmt::join(keys, ","));
      }
    }
    if (!plan.missing.empty()) {
      ++changed;
      std::cout << fmt::format("  not carried: stored tensors the request does not hold: {}\n",
                               plan.missing);
    }
    if (changed > 0 && args.strict_objects) {
      Fail(ErrorKind::kInvalidArgument,
           "reshard {} under {}: {} stored object(s) would not be carried (listed above); "
           "--strict-objects refuses",
           args.dir, args.topology, changed);
    }
  }
  ReshardResult result;
  bool prints = true;
  auto step = [&](Communicator& comm) {
    return ReshardRank(spec, args.dir, args.topology, args.out, format, strict, comm,
                       /*objects=*/true, /*regrid_objects=*/verl.has_value());
  };
  if (args.backend == "threads") {
    std::vector<ReshardResult> results(world);
    RunRanks(world, [&](Communicator& comm) { results[comm.rank()] = step(comm); });
    result = results[0];
  } else if (args.backend == "mpi") {
#ifdef DISTCKPT_HAVE_MPI
    std::unique_ptr<Communicator> comm = MpiWorld();
    if (comm->size() != world) {
      Fail(ErrorKind::kInvalidArgument, "the topology needs {} ranks but mpirun started {}", world,
           comm->size());
    }
    result = step(*comm);
    prints = comm->rank() == 0;
#else
    Fail(ErrorKind::kUnsupported, "this distckpt was built without MPI");
#endif
  } else {
    Fail(ErrorKind::kInvalidArgument, "unknown backend '{}' (threads or mpi)", args.backend);
  }
  if (prints) {
    // Megatron's integrity.json stays valid: the output gets its own when the source had one.
    if (Env::Default()->FileExists(JoinPath(args.dir, kMegatronIntegrityFileName)))
      WriteMegatronIntegrity(Env::Default(), args.out);
    if (verl) FinishVerlMegatron(*verl, Topology::Parse(args.topology));
    if (root) WriteTracker(Env::Default(), root->out_root, root->tracker);
    std::cout << fmt::format(
        "resharded {} to {} under {} ({} format): {} bytes read, {} bytes written, {:.3f} s{}\n",
        args.dir, args.out, args.topology, args.format, result.bytes_read, result.bytes_written,
        result.seconds,
        root ? fmt::format("; tracker {} written in {}", root->tracker.ToString(), root->out_root)
             : "");
  }
  return kExitOk;
}

}  // namespace distckpt
