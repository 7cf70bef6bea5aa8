// distckpt save: a scenario's state saved under a topology.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/step.h"
#include "format/format.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

// Per-rank bytes of a fully parallel or async save, and how even they are.
void PrintRankBytesWritten(const StepReport& report, bool async) {
  uint64_t busiest = 0;
  for (size_t r = 0; r < report.rank_bytes_written.size(); ++r) {
    busiest = std::max(busiest, report.rank_bytes_written[r]);
    std::cout << fmt::format("  rank {}: wrote {} bytes\n", r, report.rank_bytes_written[r]);
  }
  std::cout << fmt::format(
      "  busiest rank: {} bytes of {} ({:.3f} of the total)\n", busiest, report.bytes_written,
      report.bytes_written ? double(busiest) / double(report.bytes_written) : 0.0);
  if (async)
    std::cout << fmt::format("  blocking part (staging): {:.3f} s\n", report.blocking_seconds);
}

int SaveCommand(const StepArgs& args) {
  CheckStepArgs(args);
  const StepOptions& step = args.step;
  Scenario s = LoadScenario(args.scenario);
  const PairSpec* pair = PairAt(s, args.pair);
  int world = Topology::Parse(args.topology).world_size();
  const Format& format = FormatByName(args.format);
  auto [report, prints] = OnRanks(args.backend, world, [&](Communicator& comm) {
    return SaveStep(s, pair, args.topology, args.dir, comm, &format, step);
  });
  if (prints) {
    WriteReport(args.report_json, report);
    if (!report.ok)
      std::cerr << "distckpt save: " << report.error << "\n";
    else
      std::cout << fmt::format("saved {} under {} to {}: {} bytes written in {:.3f} s\n", s.name,
                               args.topology,
                               step.local_dir.empty() ? args.dir : step.local_dir + " (local)",
                               report.bytes_written, report.seconds);
    if (report.ok && (step.save.kind != SaveStrategy::Kind::kPlain || step.async))
      PrintRankBytesWritten(report, step.async);
  }
  return report.ok ? kExitOk : kExitInputError;
}

}  // namespace

Command AddSaveCommand(CLI::App& app) {
  auto args = std::make_shared<StepArgs>();
  CLI::App* cmd = app.add_subcommand("save", "save a scenario's state under a topology");
  AddStepOptions(cmd, *args, false);
  return {cmd, [args](CommandLine& line) {
            return OnBackend(line, args->backend, &args->topology,
                             [&] { return SaveCommand(*args); });
          }};
}

}  // namespace distckpt
