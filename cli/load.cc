// distckpt load: a scenario's state loaded under a topology, every element
// checked.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/index_hint.h"
#include "cli/options.h"
#include "cli/step.h"
#include "core/error.h"
#include "format/format.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

int LoadCommand(const StepArgs& args) {
  CheckStepArgs(args);
  const StepOptions& step = args.step;
  Scenario s = LoadScenario(args.scenario);
  const PairSpec* pair = PairAt(s, args.pair);
  std::string saved = args.saved_topology;
  if (saved.empty() && !step.local_dir.empty()) saved = args.topology;  // local: as loaded
  if (saved.empty()) {
    Env* env = Env::Default();
    saved = DetectFormat(env, args.dir).OpenReader(env, args.dir)->metadata().topology;
    if (saved.empty()) {
      Fail(ErrorKind::kInvalidArgument, "{} records no topology; pass --saved-topology", args.dir);
    }
  }
  StrictHandling strict = args.strict.empty() ? (pair && pair->strict ? *pair->strict : s.strict)
                                              : ParseStrictHandling(args.strict);
  VerifyPolicy verify = args.verify.empty() ? (pair ? pair->verify : VerifyPolicy::kWhenWhole)
                                            : ParseVerifyPolicy(args.verify);
  int world = Topology::Parse(args.topology).world_size();
  auto [report, prints] = OnRanks(args.backend, world, [&](Communicator& comm) {
    return LoadStep(s, pair, saved, args.topology, args.dir, comm, strict, verify, step);
  });
  int code = report.ok ? kExitOk : report.value_mismatch ? kExitVerdictFailed : kExitInputError;
  if (!prints) return code;
  WriteReport(args.report_json, report);
  if (!report.ok) {
    std::cerr << "distckpt load: " << report.error << "\n";
    if (report.value_mismatch && report.chunks_unverified > 0) {
      std::cerr << fmt::format(
          "distckpt load: note: {} stored chunks were read partially, so their checksums were "
          "not verified; --verify always reads them whole to check for corruption\n",
          report.chunks_unverified);
    }
    return code;
  }
  std::cout << fmt::format(
      "loaded {} (saved under {}) under {}: every element matches\n"
      "  bytes needed {}, bytes read {} (read/needed {}), chunks verified {}, partially read {}, "
      "{:.3f} s\n",
      s.name, saved, args.topology, report.bytes_needed, report.bytes_read,
      Ratio(report.bytes_read, report.bytes_needed), report.chunks_verified,
      report.chunks_unverified, report.seconds);
  if (step.local_dir.empty()) {
    std::cout << IndexHint(Env::Default(), args.dir, report.bytes_read, report.bytes_needed,
                           args.dir);
  }
  for (size_t r = 0; r < report.rank_bytes_read.size(); ++r) {
    std::cout << fmt::format(
        "  rank {}: read {} bytes of the {} bytes of stored chunks it touched ({})\n", r,
        report.rank_bytes_read[r], report.rank_chunk_bytes[r],
        Ratio(report.rank_bytes_read[r], report.rank_chunk_bytes[r]));
  }
  for (const auto& [key, count] : report.fp8_saturated) {
    std::cout << fmt::format("  fp8 '{}': {} values saturated\n", key, count);
  }
  return code;
}

}  // namespace

Command AddLoadCommand(CLI::App& app) {
  auto args = std::make_shared<StepArgs>();
  CLI::App* cmd = app.add_subcommand(
      "load", "load a scenario's state under a topology and check every element");
  AddStepOptions(cmd, *args, true);
  AddIndexDirOption(cmd, args->index_dir);
  return {cmd, [args](CommandLine& line) {
            UseIndexDir(args->index_dir);
            return OnBackend(line, args->backend, &args->topology,
                             [&] { return LoadCommand(*args); });
          }};
}

}  // namespace distckpt
