// distckpt reshard: a spec's request loaded from a checkpoint under a
// topology and saved there (harness/tools/verify.h: ReshardRank); or verl's
// per-rank FSDP files for another world size (format/verl/verl_reshard.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/index_hint.h"
#include "cli/options.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "core/json_parse.h"            // internal: the bounded JSON reader of user files
#include "format/dcp/megatron_files.h"  // internal: Megatron's metadata.json beside a reshard
#include "format/format.h"
#include "format/verl/verl_megatron.h"
#include "format/verl/verl_reshard.h"
#include "harness/tools/verify.h"
#include "interop/verl_megatron_carry.h"
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/tracker.h"
#include "topology/topology.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace distckpt {
namespace {

struct ReshardArgs {
  std::string dir, topology, spec, out;
  std::vector<std::string> sets;
  std::string format;  // "" = the source's format (dcp-common-pt when it has common.pt)
  std::string backend = "threads";
  std::string strict;
  bool strict_objects = false;  // refuse when a stored object would not be carried
  int world_size = 0;           // > 0: a verl FSDP checkpoint to N ranks (ReshardVerlCommand)
  int fsdp_version = 0;         // with world_size: 1 or 2, 0 = the source's
  int fsdp_size = 0;            // with world_size: HSDP shard group size, 0 = the source's
  std::string index_dir;        // sidecar item indexes (`distckpt index`): DISTCKPT_INDEX_DIR
};

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
  for (const std::string& note : CarryVerlMegatronFiles(
           Env::Default(), {v.component, v.out_component, v.step, v.out_step}, topo.tp, topo.pp)) {
    std::cout << "  " << note << "\n";
  }
}

// Loads the spec's request from the checkpoint under a topology and saves
// it there into --out (0 done, 2 failed).
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
        "resharded {} to {} under {} ({} format): {} bytes read of {} needed (read/needed {}; "
        "the tensor chunks touched hold {}), {} bytes written, {:.3f} s{}\n",
        args.dir, args.out, args.topology, args.format, result.bytes_read, result.bytes_needed,
        Ratio(result.bytes_read, result.bytes_needed), result.chunk_bytes, result.bytes_written,
        result.seconds,
        root ? fmt::format("; tracker {} written in {}", root->tracker.ToString(), root->out_root)
             : "");
    std::cout << IndexHint(Env::Default(), args.dir, result.bytes_read, result.bytes_needed,
                           given.dir);
  }
  return kExitOk;
}

// distckpt reshard DIR --world-size N [--fsdp 1|2] [--fsdp-size S] --out OUT: verl's per-rank
// files for N ranks (format/verl/verl_reshard.h).
int ReshardVerlCommand(const ReshardArgs& args) {
  VerlReshardOptions options;
  options.world_size = args.world_size;
  options.fsdp_version = args.fsdp_version;
  options.fsdp_size = args.fsdp_size;
  const VerlReshardReport report = ReshardVerl(args.dir, args.out, options);
  for (const std::string& line : report.lines) std::cout << line << "\n";
  std::cout << fmt::format("{}: verl checkpoint for {} ranks written to {}\n", args.dir,
                           args.world_size, args.out);
  return kExitOk;
}

}  // namespace

Command AddReshardCommand(CLI::App& app) {
  auto args = std::make_shared<ReshardArgs>();
  CLI::App* reshard = app.add_subcommand(
      "reshard", "load a spec's request from a checkpoint under a topology and save it there");
  reshard
      ->add_option("dir", args->dir,
                   "checkpoint directory (native or DCP), or a run root with Megatron's "
                   "tracker: its tracker's iteration into --out/iter_N plus a tracker")
      ->required();
  reshard->add_option("--topology,-t", args->topology,
                      "topology to reshard to (required unless --world-size)");
  reshard->add_option("--world-size", args->world_size,
                      "verl FSDP checkpoint (a step folder or its actor/): the world size to "
                      "write verl's per-rank files for");
  reshard
      ->add_option("--fsdp", args->fsdp_version,
                   "with --world-size: FSDP 1 or 2 "
                   "(default: the source's)")
      ->check(CLI::IsMember({1, 2}));
  reshard->add_option("--fsdp-size", args->fsdp_size,
                      "with --world-size: verl's fsdp_size, ranks per shard group; below the "
                      "world size writes HSDP (a 2-D ddp x fsdp mesh, FSDP2); -1: one group "
                      "(default: an HSDP source's, when it divides the world size)");
  AddSpecOptions(reshard, args->spec, args->sets);
  reshard->get_option("--spec")->required(false);  // not for --world-size (verl)
  reshard->add_option("--out,-o", args->out, "directory of the new checkpoint")->required();
  reshard->add_option("--format", args->format,
                      "native, dcp, dcp-common-pt, dcp-1.13 or fsdp-dtensor (default: the "
                      "source's format)");
  reshard->add_option("--backend", args->backend, "threads or mpi (run under mpirun)")
      ->check(CLI::IsMember({"threads", "mpi"}));
  reshard->add_option("--strict", args->strict, "strict handling mode (default: the spec's)");
  reshard->add_flag("--strict-objects", args->strict_objects,
                    "refuse when a stored object (rng_state, rerun or dataloader state) would not "
                    "be carried into the output");
  AddIndexDirOption(reshard, args->index_dir);
  return {reshard, [args](CommandLine& line) {
            UseIndexDir(args->index_dir);
            return OnBackend(line, args->backend, &args->topology, [&] {
              if (args->world_size > 0) return ReshardVerlCommand(*args);
              if (args->topology.empty() || args->spec.empty()) {
                std::cerr << "distckpt reshard: --topology and --spec are required (or "
                             "--world-size for a verl checkpoint)\n";
                return kExitInputError;
              }
              return ReshardCommand(*args);
            });
          }};
}

}  // namespace distckpt
