// distckpt: the command-line front end (see README.md for the contract).
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/hf.h"
#include "core/device.h"
#include "core/error.h"
#include "format/dcp/unknown_globals.h"
#include "io/env.h"
#include "io/storage_path.h"
#include "manager/catalog.h"
#include "topology/topology.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace {

using distckpt::LoadStrategy;
using distckpt::SaveStrategy;
using distckpt::StepStrategy;

// --comm: which communicator carries a load's exchange.
void AddCommOption(CLI::App* cmd, StepStrategy& strategy, const char* help) {
  cmd->add_option_function<std::string>(
         "--comm", [&strategy](const std::string& comm) { strategy.nccl = comm == "nccl"; }, help)
      ->check(CLI::IsMember({"default", "nccl"}));
}

// The step's flags, parsed straight into its StepStrategy (harness/runner.h).
void AddStepOptions(CLI::App* cmd, distckpt::StepArgs& a, bool load) {
  StepStrategy& strategy = a.strategy;
  cmd->add_option("scenario", a.scenario, "scenario file (default: the embedded default scenario)");
  cmd->add_option("--topology,-t", a.topology, "topology, e.g. tp=2,pp=2,dp=2")->required();
  cmd->add_option("--dir,-d", a.dir, "checkpoint directory (required unless --local)");
  cmd->add_option("--backend", a.backend, "threads or mpi (one rank per mpirun process)")
      ->check(CLI::IsMember({"threads", "mpi"}));
  cmd->add_option("--pair", a.pair, "index of the scenario pair whose extras apply");
  cmd->add_option("--report-json", a.report_json, "write the step report (JSON) here");
  if (!load)
    cmd->add_option("--format", a.format,
                    "checkpoint format: native or dcp (also dcp-1.13, dcp-common-pt: Megatron's "
                    "common.pt layout before Megatron-Core 0.20, fsdp-dtensor)");
  cmd->add_option("--local", strategy.local_dir,
                  "a local checkpoint: rank r uses DIR/r (node-local storage), instead of --dir");
  cmd->add_option_function<std::string>(
      "--replication",
      [&strategy](const std::string& text) {
        try {
          strategy.replication = distckpt::ParseReplicationParams(text);
        } catch (const distckpt::CheckpointError& e) {
          throw CLI::ValidationError("--replication", e.what());
        }
      },
      "local: J,F = cliques {n, n+J, ..., n+(F-1)J}, each rank's files copied to its clique "
      "(default 1,1: no copies)");
  cmd->add_option("--device", strategy.device,
                  "where the ranks' tensors live: cpu, cuda (rank r on device r mod the "
                  "devices) or cuda:N");
  if (!load) {
    cmd->add_flag_callback(
        "--fully-parallel",
        [&strategy] { strategy.save.kind = SaveStrategy::Kind::kFullyParallel; },
        "spread the writing of replicated shards over each DP group");
    cmd->add_flag("--overwrite", strategy.overwrite,
                  "replace a committed checkpoint in --dir, of any format (a staging directory "
                  "swapped in at commit); without it such a save is refused");
    cmd->add_flag("--async", strategy.async,
                  "stage, write in background threads, then finalize (commit)");
    cmd->add_option("--writers", strategy.save.writers,
                    "async: writer threads per rank, one data file each")
        ->check(CLI::PositiveNumber);
    return;
  }
  AddCommOption(cmd, strategy,
                "the exchange of --fully-parallel / --two-stage loads: default (the ranks' "
                "communicator) or nccl (--device cuda, --backend mpi)");
  CLI::Option* fully_parallel = cmd->add_flag_callback(
      "--fully-parallel", [&strategy] { strategy.load.kind = LoadStrategy::Kind::kFullyParallel; },
      "read each shard once per DP group and exchange it between the ranks");
  cmd->add_option_function<std::string>(
         "--exchange",
         [&strategy](const std::string& name) {
           strategy.load.exchange = distckpt::ParseExchangeAlgorithm(name);
         },
         "fully parallel exchange: broadcast (default) or gather_rounds")
      ->check(CLI::IsMember({"broadcast", "gather_rounds"}));
  cmd->add_flag_callback(
         "--two-stage", [&strategy] { strategy.load.kind = LoadStrategy::Kind::kTwoStage; },
         "the lowest DP rank holding a shard reads it and broadcasts it, one shard at a time")
      ->excludes(fully_parallel);
  cmd->add_option("--saved-topology", a.saved_topology,
                  "topology the checkpoint was saved under (default: recorded in it)");
  cmd->add_option("--strict", a.strict, "strict handling mode (default: the scenario's)");
  cmd->add_option("--resave-dir", strategy.resave_dir,
                  "after a good load, save the loaded state again under --topology into this "
                  "directory");
  cmd->add_option("--verify", a.verify,
                  "checksums: whole = chunks read in full (default), always = read every touched "
                  "chunk in full to verify it, never (default: the pair's \"verify\", else whole)")
      ->check(CLI::IsMember({"whole", "always", "never"}));
}

void AddReportOptions(CLI::App* cmd, distckpt::ReportPaths& paths, const char* per) {
  cmd->add_option("--report", paths.json, "write a JSON report here");
  cmd->add_option("--junit", paths.junit,
                  fmt::format("write a JUnit XML report (one testcase per {})", per));
  cmd->add_option("--markdown", paths.markdown,
                  "write a Markdown report (a table for a PR comment)");
}

void AddSpecOptions(CLI::App* cmd, std::string& spec, std::vector<std::string>& sets) {
  cmd->add_option("--spec", spec,
                  "request spec: a scenario / spec file, or gpt (inferred from the checkpoint)")
      ->required();
  cmd->add_option("--set", sets, "field=value for --spec gpt (repeatable)");
}

// CLI11 reads an integer with strtoll / strtoull in base 0: "-1" into an
// unsigned field, 99999999999999999999 saturated to 2^63 - 1, 010 as
// octal, 0x10 as hex. Every integer option of every command takes plain
// decimal digits (a '-' first for a signed one) whose value fits 64 bits;
// CLI11 then checks it fits the option's type.
void StrictIntegers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options({})) {
    const std::string type = opt->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    const bool is_signed = type == "INT";
    opt->check(CLI::Validator(
        [is_signed](std::string& text) -> std::string {
          std::string_view digits = text;
          if (is_signed && digits.starts_with('-')) digits.remove_prefix(1);
          if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                             [](char c) { return c >= '0' && c <= '9'; })) {
            return fmt::format("'{}' is not a decimal integer{}", text,
                               is_signed ? "" : " (no sign: the value cannot be negative)");
          }
          bool fits;
          if (is_signed) {
            int64_t v;
            fits = std::from_chars(text.data(), text.data() + text.size(), v).ec == std::errc();
          } else {
            uint64_t v;
            fits = std::from_chars(text.data(), text.data() + text.size(), v).ec == std::errc();
          }
          return fits ? std::string() : fmt::format("'{}' is out of range", text);
        },
        "", "strict integer"));
  }
  for (CLI::App* cmd : app.get_subcommands({})) StrictIntegers(*cmd);
}

// A training run's root given where a checkpoint is expected (`verify ROOT`):
// the checkpoint its tracker names, said on stderr.
void ResolveRunRoot(std::string& path) {
  if (std::optional<std::string> dir =
          distckpt::TrackedIterationDir(distckpt::Env::Default(), path)) {
    std::cerr << "note: " << path << " is a training run's root: reading " << *dir
              << ", the checkpoint its tracker names\n";
    path = *dir;
  }
}

#ifdef DISTCKPT_HAVE_MPI
// `save|load|reshard --backend mpi` started outside mpirun: the command runs
// itself again as `mpirun -np <world of --topology> distckpt <same arguments>`
// (as `run --backend mpi` launches its jobs), passing stdout, stderr and the
// exit code through. Inside a job Open MPI sets OMPI_COMM_WORLD_SIZE.
// nullopt: nothing to launch (already in a job, or a world of one).
std::optional<int> RelaunchUnderMpirun(int argc, char** argv, const std::string& topology) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || topology.empty()) return std::nullopt;
  const int world = distckpt::Topology::Parse(topology).world_size();
  if (world == 1) return std::nullopt;
  std::vector<std::string> args{"mpirun", "--oversubscribe"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"-np", std::to_string(world), "/proc/self/exe"});
  // /proc/self/exe is this binary as mpirun's ranks see it: resolved here.
  std::error_code ec;
  args.back() = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) args.back() = argv[0];
  args.insert(args.end(), argv + 1, argv + argc);
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::cerr << "distckpt: starting " << world << " ranks: mpirun -np " << world << " ...\n";
  pid_t pid = 0;
  if (posix_spawnp(&pid, "mpirun", nullptr, nullptr, cargv.data(), environ) != 0) {
    distckpt::Fail(distckpt::ErrorKind::kIo, "cannot start mpirun (is Open MPI installed?)");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : distckpt::kExitInputError;
}
#endif  // DISTCKPT_HAVE_MPI

// Every checkpoint path of every command takes a URI too (io/storage_path.h):
// file:///p is the path /p; a storage this build cannot reach (s3://) or an
// unknown scheme is refused naming it (exit 2) before anything runs.
void StoragePaths(CLI::App& app) {
  static const char* kPathOptions[] = {"--dir", "dir",      "--local",      "a",
                                       "b",     "--out",    "src",          "checkpoint",
                                       "out",   "--resume", "--resave-dir", "--work-dir"};
  for (CLI::Option* opt : app.get_options({})) {
    if (std::find_if(std::begin(kPathOptions), std::end(kPathOptions), [&](const char* name) {
          return opt->check_name(name);
        }) == std::end(kPathOptions))
      continue;
    opt->transform(CLI::Validator(
        [](std::string& text) -> std::string {
          try {
            distckpt::StoragePath where = distckpt::EnvForPath(text);
            if (where.env != distckpt::Env::Default())
              return fmt::format("{}: {} storage is not reachable from the command line", text,
                                 where.env->name());
            text = where.path;
            return "";
          } catch (const distckpt::CheckpointError& e) {
            return e.what();
          }
        },
        "", "storage path"));
  }
  for (CLI::App* cmd : app.get_subcommands({})) StoragePaths(*cmd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"distckpt: distributed checkpoint save/load under any parallel layout"};
  app.require_subcommand(1);
  distckpt::StepArgs save_args, load_args;
  distckpt::RunArgs run_args;
  std::string inspect_dir;
  bool inspect_json = false;

  CLI::App* run = app.add_subcommand(
      "run", "save under A, load under B, for a scenario's pairs or its topology matrix");
  run->add_option("scenario", run_args.scenario,
                  "scenario file (default: the embedded default scenario)");
  run->add_flag("--matrix", run_args.matrix, "every ordered pair of the scenario's topologies");
  run->add_option("--backend", run_args.backend, "threads or mpi")
      ->check(CLI::IsMember({"threads", "mpi"}));
  run->add_option("--format", run_args.format, "native or dcp (also dcp-1.13, fsdp-dtensor)");
  run->add_option("--report", run_args.report, "write a JSON report per pair here");
  run->add_option("--work-dir", run_args.work_dir,
                  "where checkpoints are written (default: a temp dir)");
  run->add_flag("--keep", run_args.keep, "keep the checkpoints");
  run->add_option("--device", run_args.strategy.device,
                  "where the ranks' tensors live: cpu, cuda (rank r on device r mod the "
                  "devices) or cuda:N");
  run->add_flag_callback(
      "--fully-parallel",
      [&run_args] {
        run_args.strategy.save.kind = SaveStrategy::Kind::kFullyParallel;
        run_args.strategy.load.kind = LoadStrategy::Kind::kFullyParallel;
      },
      "every save and load fully parallel within the DP groups");
  AddCommOption(run, run_args.strategy,
                "the loads' exchange: default or nccl (--device cuda --fully-parallel, "
                "--backend mpi)");
  run->add_option("--junit", run_args.junit, "write a JUnit XML report (one testcase per pair)");
  run->add_option("--markdown", run_args.markdown, "write a Markdown report (a table per pair)");
  CLI::App* save = app.add_subcommand("save", "save a scenario's state under a topology");
  AddStepOptions(save, save_args, false);
  CLI::App* load = app.add_subcommand(
      "load", "load a scenario's state under a topology and check every element");
  AddStepOptions(load, load_args, true);
  CLI::App* inspect = app.add_subcommand("inspect", "list what a checkpoint holds");
  inspect->add_option("dir", inspect_dir, "checkpoint directory")->required();
  inspect->add_flag("--json", inspect_json, "print the metadata as JSON");
  bool inspect_check = false;
  inspect->add_flag("--check", inspect_check,
                    "also check every data file is present with the sizes the metadata implies");
  std::string diff_a, diff_b;
  distckpt::DiffOptions diff_options;
  bool diff_json = false;
  CLI::App* diff =
      app.add_subcommand("diff", "compare two checkpoints in global space (any layouts, formats)");
  diff->add_option("a", diff_a, "first checkpoint directory")->required();
  diff->add_option("b", diff_b, "second checkpoint directory")->required();
  diff->add_option("--atol", diff_options.atol, "absolute tolerance (default: bitwise equality)");
  diff->add_option("--rtol", diff_options.rtol, "relative tolerance");
  diff->add_option("--only", diff_options.only,
                   "compare only keys matching this glob (repeatable; objects match by key or "
                   "unique key, the common state is 'common')");
  diff->add_option("--exclude", diff_options.exclude,
                   "leave out keys matching this glob (repeatable)");
  diff->add_flag("--json", diff_json,
                 "print a JSON verdict per key (elements, differing, max abs / rel error)");
  distckpt::ReportPaths diff_reports;
  AddReportOptions(diff, diff_reports, "key");

  distckpt::VerifyArgs verify_args;
  CLI::App* verify = app.add_subcommand(
      "verify", "would a checkpoint load under a topology? (metadata only; --data: every byte)");
  verify->add_option("dir", verify_args.dir, "checkpoint directory (native or DCP)")->required();
  verify->add_option("--topology,-t", verify_args.topologies, "topology (repeatable)")->required();
  AddSpecOptions(verify, verify_args.spec, verify_args.sets);
  verify->add_option("--strict", verify_args.strict, "strict handling mode (default: the spec's)");
  verify->add_option("--saved-topology", verify_args.saved_topology,
                     "topology the checkpoint was saved under (default: recorded in it)");
  verify->add_flag("--data", verify_args.data,
                   "also read every stored byte once and check every checksum");
  verify
      ->add_flag("--require-checksums", verify_args.require_checksums,
                 "with --data: fail (exit 1) when anything carries no checksum to check")
      ->needs("--data");
  verify->add_flag("--strict-objects", verify_args.strict_objects,
                   "fail a topology under which a stored object (rng_state, rerun or "
                   "dataloader state) would be dropped or re-gridded");
  AddReportOptions(verify, verify_args.reports, "topology");

  distckpt::ReshardArgs reshard_args;
  CLI::App* reshard = app.add_subcommand(
      "reshard", "load a spec's request from a checkpoint under a topology and save it there");
  reshard
      ->add_option("dir", reshard_args.dir,
                   "checkpoint directory (native or DCP), or a run root with Megatron's "
                   "tracker: its tracker's iteration into --out/iter_N plus a tracker")
      ->required();
  reshard->add_option("--topology,-t", reshard_args.topology,
                      "topology to reshard to (required unless --world-size)");
  reshard->add_option("--world-size", reshard_args.world_size,
                      "verl FSDP checkpoint (a step folder or its actor/): the world size to "
                      "write verl's per-rank files for");
  reshard
      ->add_option("--fsdp", reshard_args.fsdp_version,
                   "with --world-size: FSDP 1 or 2 "
                   "(default: the source's)")
      ->check(CLI::IsMember({1, 2}));
  AddSpecOptions(reshard, reshard_args.spec, reshard_args.sets);
  reshard->get_option("--spec")->required(false);  // not for --world-size (verl)
  reshard->add_option("--out,-o", reshard_args.out, "directory of the new checkpoint")->required();
  reshard->add_option("--format", reshard_args.format,
                      "native, dcp, dcp-common-pt, dcp-1.13 or fsdp-dtensor (default: the "
                      "source's format)");
  reshard->add_option("--backend", reshard_args.backend, "threads or mpi (run under mpirun)")
      ->check(CLI::IsMember({"threads", "mpi"}));
  reshard->add_option("--strict", reshard_args.strict,
                      "strict handling mode (default: the spec's)");
  reshard->add_flag("--strict-objects", reshard_args.strict_objects,
                    "refuse when a stored object (rng_state, rerun or dataloader state) would not "
                    "be carried into the output");
  std::string dump_dir, dump_key, dump_out;
  CLI::App* dump =
      app.add_subcommand("dump",
                         "write one global tensor (little-endian, stored dtype), or one object "
                         "as stored, to a file");
  dump->add_option("dir", dump_dir, "checkpoint directory (native or DCP)")->required();
  dump->add_option("key", dump_key, "tensor key, or an object's unique key")->required();
  dump->add_option("--out,-o", dump_out, "output file")->required();

  std::string verl_src, verl_dir, verl_format = "native";
  CLI::App* import_verl = app.add_subcommand(
      "import-verl",
      "convert verl's per-rank FSDP files into a checkpoint (any world size on load)");
  import_verl
      ->add_option("src", verl_src, "verl checkpoint directory (model_world_size_W_rank_r.pt)")
      ->required();
  import_verl->add_option("--dir", verl_dir, "destination checkpoint directory")->required();
  import_verl->add_option("--format", verl_format, "native (default) or a DCP format name");
  distckpt::TrainArgs train_args;
  CLI::App* train = app.add_subcommand(
      "train", "a simulated training loop checkpointed through the checkpoint manager");
  train->add_option("scenario", train_args.scenario, "scenario file (default: embedded)");
  train->add_option("--dir,-d", train_args.dir, "checkpoint root of the run")->required();
  train
      ->add_option("--layout", train_args.layout,
                   "megatron (iter_0000100/) or verl (global_step_100/)")
      ->check(CLI::IsMember({"megatron", "verl"}));
  train->add_option("--topology,-t", train_args.topology, "topology of this run");
  train->add_option("--steps", train_args.steps, "train up to this step")->required();
  train->add_option("--save-interval", train_args.save_interval, "save every K steps");
  train->add_option("--keep", train_args.keep, "keep the last K checkpoints (0 = all)");
  train->add_option("--retain-interval", train_args.retain_interval,
                    "also keep every multiple of R (Megatron's --save-retain-interval)");
  train->add_flag("--async", train_args.async, "asynchronous saves (tracker in the finalize)");
  train->add_option("--writers", train_args.writers, "async writer threads per rank");
  train->add_option("--resume", train_args.resume,
                    "auto (the tracker), a checkpoint path, or an iteration");
  train->add_option("--backend", train_args.backend, "threads or mpi")
      ->check(CLI::IsMember({"threads", "mpi"}));
  train->add_option("--format", train_args.format, "native or dcp");
  train->add_option("--components", train_args.components,
                    "verl: component folders, e.g. actor,critic");
  train->add_option("--save-contents", train_args.save_contents,
                    "model,optimizer,extra (any subset)");
  train->add_option("--load-contents", train_args.load_contents,
                    "contents loaded and checked on resume");
  train->add_option("--step-ms", train_args.step_ms, "simulated compute per step (ms)");
  train->add_option("--non-persistent-save-interval", train_args.non_persistent_save_interval,
                    "also save every K steps into DIR/non_persistent/ (only the newest kept)");
  train->add_option("--save-on-signal", train_args.save_on_signal,
                    "on these signals (SIGTERM,SIGUSR1,...): save the step reached, finalize, "
                    "exit 0");
  train->add_flag("--verbose", train_args.verbose, "print every manager phase");
  distckpt::ManageArgs manage_args;
  CLI::App* manage = app.add_subcommand("manage", "a training run's checkpoint root");
  manage->add_option("action", manage_args.action, "list or prune")
      ->required()
      ->check(CLI::IsMember({"list", "prune"}));
  manage->add_option("dir", manage_args.dir, "checkpoint root")->required();
  manage->add_option("--layout", manage_args.layout, "megatron or verl")
      ->check(CLI::IsMember({"megatron", "verl"}));
  manage->add_flag("--json", manage_args.json, "list as JSON");
  manage->add_option("--keep", manage_args.keep, "prune: keep the last K");
  manage->add_flag("--include-foreign", manage_args.include_foreign,
                   "prune: also delete superseded iterations distckpt did not write (Megatron's "
                   "own); the tracker's is never deleted");
  manage->add_option("--retain-interval", manage_args.retain_interval,
                     "prune: keep multiples of R");

  distckpt::ExportArgs export_args;
  CLI::App* exp = app.add_subcommand(
      "export",
      "a checkpoint (any topology, format) to Hugging Face safetensors shards, Megatron's "
      "fsdp_dtensor layout or another format");
  exp->add_option("checkpoint", export_args.checkpoint, "checkpoint directory")->required();
  exp->add_option("--to", export_args.to,
                  "hf (default), fsdp-dtensor (Megatron's --ckpt-format fsdp_dtensor: per-layer "
                  "keys, uneven FSDP chunks for --topology), or native | dcp | dcp-1.13 | "
                  "dcp-common-pt (the same tensors in another format)")
      ->check(CLI::IsMember({"hf", "fsdp-dtensor", "native", "dcp", "dcp-1.13", "dcp-common-pt"}));
  exp->add_option("out", export_args.out, "output directory")->required();
  exp->add_option(
      "--spec", export_args.spec,
      "--to hf, fsdp-dtensor: the model's fields, a JSON spec or scenario file (layers, hidden, "
      "heads, query_groups, ffn, vocab, glu, tied, prefix), or gpt (inferred from "
      "the checkpoint; --set heads=H ...); --to hf also names (stored keys are HF names: "
      "verl's FSDP models; optimizer state and objects left out)");
  exp->add_option("--config", export_args.config,
                  "--spec names: the model's config.json to copy beside the shards (verl: "
                  "SRC/huggingface/config.json)");
  exp->add_option("--set", export_args.sets, "field=value for --spec gpt (repeatable)");
  exp->add_option("--drop", export_args.drops,
                  "--to hf: leave stored tensors matching GLOB (Megatron key or HF name) out on "
                  "purpose (repeatable; listed in the summary)");
  exp->add_option("--max-shard-size", export_args.max_shard_size, "e.g. 5GB (default), 500MB");
  exp->add_option("--dtype", export_args.dtype, "convert to this dtype (default: as stored)");
  exp->add_option("--topology,-t", export_args.topology,
                  "--to fsdp-dtensor: the ranks that hold it, dp=N[,tp=T]");

  distckpt::ImportArgs import_args;
  CLI::App* imp = app.add_subcommand(
      "import", "a Hugging Face model (safetensors shards) into a checkpoint under a topology");
  imp->add_option("out", import_args.out, "output checkpoint directory")->required();
  imp->add_option("--from", import_args.from, "hf")->check(CLI::IsMember({"hf"}));
  imp->add_option("dir", import_args.dir, "HF model directory")->required();
  imp->add_option("--spec", import_args.spec,
                  "the GPT model: a JSON spec or scenario file (as export's --spec)")
      ->required();
  imp->add_option("--topology", import_args.topology, "topology to save under")->required();
  imp->add_option("--drop", import_args.drops,
                  "leave HF tensors matching GLOB out on purpose (repeatable); any other HF "
                  "tensor the model has no place for refuses the import");
  imp->add_option("--format", import_args.format, "native (default), dcp or dcp-1.13")
      ->check(CLI::IsMember({"native", "dcp", "dcp-1.13"}));

  bool strict_globals = false;
  app.add_flag("--strict-globals", strict_globals,
               "refuse a pickled class off distckpt's allow-list (Megatron's weights_only load) "
               "instead of carrying it as opaque data with a warning; any command");
  app.fallthrough();

  CLI::App* devices = app.add_subcommand(
      "devices", "print how many CUDA devices this build and machine have (0: none)");

  StrictIntegers(app);
  StoragePaths(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : distckpt::kExitInputError;
  }

  if (strict_globals) distckpt::SetUnknownGlobalPolicy(distckpt::UnknownGlobalPolicy::kRefuse);
  // Every unknown class a command carried, named once it has run (also when it failed).
  struct WarnUnknownGlobals {
    ~WarnUnknownGlobals() {
      for (const distckpt::UnknownGlobalNote& note : distckpt::TakeUnknownGlobalNotes())
        std::cerr << distckpt::DescribeUnknownGlobal(note) << "\n";
    }
  } warn_unknown_globals;

  bool mpi = (save->parsed() && save_args.backend == "mpi") ||
             (load->parsed() && load_args.backend == "mpi") ||
             (reshard->parsed() && reshard_args.backend == "mpi") ||
             (train->parsed() && train_args.backend == "mpi");
  try {
#ifdef DISTCKPT_HAVE_MPI
    if (mpi && !train->parsed()) {
      const std::string& topology = save->parsed()   ? save_args.topology
                                    : load->parsed() ? load_args.topology
                                                     : reshard_args.topology;
      if (std::optional<int> rc = RelaunchUnderMpirun(argc, argv, topology)) return *rc;
    }
    std::unique_ptr<distckpt::MpiSession> session;
    if (mpi) session = std::make_unique<distckpt::MpiSession>(&argc, &argv);
#else
    (void)mpi;
#endif
    if (devices->parsed()) {
      std::cout << distckpt::CudaDeviceCount() << " CUDA device(s)"
                << (distckpt::CudaSimulated() ? " (simulated: DISTCKPT_SIMULATE_CUDA)"
                    : distckpt::CudaBuilt()   ? ""
                                              : " (this build has no CUDA support)")
                << "\n";
      return distckpt::kExitOk;
    }
    // (every one of these strings is empty unless its command was parsed)
    for (std::string* path :
         {&inspect_dir, &verify_args.dir, &dump_dir, &diff_a, &diff_b, &export_args.checkpoint}) {
      if (!path->empty()) ResolveRunRoot(*path);
    }
    if (run->parsed()) return distckpt::RunCommand(run_args);
    if (save->parsed()) return distckpt::SaveCommand(save_args);
    if (load->parsed()) return distckpt::LoadCommand(load_args);
    if (exp->parsed()) {
      if (export_args.spec == "gpt") export_args.model = distckpt::InferExportModel(export_args);
      return distckpt::ExportCommand(export_args);
    }
    if (imp->parsed()) return distckpt::ImportCommand(import_args);
    if (train->parsed()) return distckpt::TrainCommand(train_args);
    if (manage->parsed()) return distckpt::ManageCommand(manage_args);
    if (inspect->parsed())
      return distckpt::InspectCommand(inspect_dir, inspect_json, inspect_check);
    if (verify->parsed()) return distckpt::VerifyCommand(verify_args);
    if (reshard->parsed() && reshard_args.world_size > 0) {
      return distckpt::ReshardVerlCommand(reshard_args);
    }
    if (reshard->parsed() && (reshard_args.topology.empty() || reshard_args.spec.empty())) {
      std::cerr << "distckpt reshard: --topology and --spec are required (or --world-size for "
                   "a verl checkpoint)\n";
      return distckpt::kExitInputError;
    }
    if (reshard->parsed()) return distckpt::ReshardCommand(reshard_args);
    if (dump->parsed()) return distckpt::DumpCommand(dump_dir, dump_key, dump_out);
    if (import_verl->parsed()) return distckpt::ImportVerlCommand(verl_src, verl_dir, verl_format);
    if (diff->parsed())
      return distckpt::DiffCommand(diff_a, diff_b, diff_options, diff_json, diff_reports);
  } catch (const distckpt::CheckpointError& e) {
    std::cerr << "distckpt: error (" << distckpt::ErrorKindName(e.kind()) << "): " << e.what()
              << "\n";
    return distckpt::kExitInputError;
  } catch (const std::exception& e) {
    // Not a CheckpointError, so its message need not name a file: name the
    // command's inputs (its arguments that are paths).
    std::string inputs;
    for (int i = 1; i < argc; ++i) {
      std::error_code ec;
      if (argv[i][0] != '-' && std::filesystem::exists(argv[i], ec))
        inputs += (inputs.empty() ? " (reading " : ", ") + std::string(argv[i]);
    }
    std::cerr << "distckpt: error: " << e.what() << (inputs.empty() ? "" : inputs + ")") << "\n";
    return distckpt::kExitInputError;
  }
  return distckpt::kExitInputError;
}
