#include "cli/step.h"

#include <fstream>

#include "core/error.h"

namespace distckpt {

void AddStepOptions(CLI::App* cmd, StepArgs& a, bool load) {
  StepOptions& step = a.step;
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
  cmd->add_option("--local", step.local_dir,
                  "a local checkpoint: rank r uses DIR/r (node-local storage), instead of --dir");
  cmd->add_option_function<std::string>(
      "--replication",
      [&step](const std::string& text) {
        try {
          step.replication = ParseReplicationParams(text);
        } catch (const CheckpointError& e) {
          throw CLI::ValidationError("--replication", e.what());
        }
      },
      "local: J,F = cliques {n, n+J, ..., n+(F-1)J}, each rank's files copied to its clique "
      "(default 1,1: no copies)");
  cmd->add_option("--device", step.device,
                  "where the ranks' tensors live: cpu, cuda (rank r on device r mod the "
                  "devices) or cuda:N");
  if (!load) {
    cmd->add_flag_callback(
        "--fully-parallel", [&step] { step.save.kind = SaveStrategy::Kind::kFullyParallel; },
        "spread the writing of replicated shards over each DP group");
    cmd->add_flag("--overwrite", step.overwrite,
                  "replace a committed checkpoint in --dir, of any format (a staging directory "
                  "swapped in at commit); without it such a save is refused");
    cmd->add_flag("--async", step.async,
                  "stage, write in background threads, then finalize (commit)");
    cmd->add_option("--writers", step.save.writers,
                    "async: writer threads per rank, one data file each")
        ->check(CLI::PositiveNumber);
    return;
  }
  AddCommOption(cmd, step,
                "the exchange of --fully-parallel / --two-stage loads: default (the ranks' "
                "communicator) or nccl (--device cuda, --backend mpi)");
  CLI::Option* fully_parallel = cmd->add_flag_callback(
      "--fully-parallel", [&step] { step.load.kind = LoadStrategy::Kind::kFullyParallel; },
      "read each shard once per DP group and exchange it between the ranks");
  cmd->add_option_function<std::string>(
         "--exchange",
         [&step](const std::string& name) { step.load.exchange = ParseExchangeAlgorithm(name); },
         "fully parallel exchange: broadcast (default) or gather_rounds")
      ->check(CLI::IsMember({"broadcast", "gather_rounds"}));
  cmd->add_flag_callback(
         "--two-stage", [&step] { step.load.kind = LoadStrategy::Kind::kTwoStage; },
         "the lowest DP rank holding a shard reads it and broadcasts it, one shard at a time")
      ->excludes(fully_parallel);
  cmd->add_option("--saved-topology", a.saved_topology,
                  "topology the checkpoint was saved under (default: recorded in it)");
  cmd->add_option("--strict", a.strict, "strict handling mode (default: the scenario's)");
  cmd->add_option("--resave-dir", step.resave_dir,
                  "after a good load, save the loaded state again under --topology into this "
                  "directory");
  cmd->add_option("--verify", a.verify,
                  "checksums: whole = chunks read in full (default), always = read every touched "
                  "chunk in full to verify it, never (default: the pair's \"verify\", else whole)")
      ->check(CLI::IsMember({"whole", "always", "never"}));
}

void CheckStepArgs(const StepArgs& args) {
  CheckStepDevice(args.step);
  if (args.dir.empty() && args.step.local_dir.empty()) {
    Fail(ErrorKind::kInvalidArgument, "--dir is required (or --local DIR for a local checkpoint)");
  }
}

const PairSpec* PairAt(const Scenario& s, int index) {
  if (index < 0) return nullptr;
  if (index >= static_cast<int>(s.pairs.size())) {
    Fail(ErrorKind::kInvalidArgument, "scenario '{}' has {} pairs; --pair {} is out of range",
         s.name, s.pairs.size(), index);
  }
  return &s.pairs[index];
}

void WriteReport(const std::string& path, const StepReport& report) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << report.ToJson().dump(2) << "\n";
  if (!out) Fail(ErrorKind::kIo, "cannot write report {}", path);
}

}  // namespace distckpt
