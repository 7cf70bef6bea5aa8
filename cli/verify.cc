// distckpt verify: would a checkpoint load under a topology? A request spec
// checked against an existing checkpoint (harness/tools/verify.h): metadata only,
// or with --data every stored byte.
#include "harness/tools/verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/index_hint.h"
#include "cli/options.h"
#include "cli/report.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

struct VerifyArgs {
  std::string dir;
  std::vector<std::string> topologies;  // one verdict (report case) each
  std::string spec;                     // a spec / scenario file, or "gpt"
  std::vector<std::string> sets;        // --set field=value (--spec gpt)
  std::string strict;                   // default: the spec's
  std::string saved_topology;
  std::string index_dir;  // --index-dir (cli/index_hint.h)
  bool data = false;      // also read every byte and check every checksum
  // With data: a chunk, object or metadata.json that carries no checksum
  // fails the data verdict (exit 1) instead of being reported as unverified.
  bool require_checksums = false;
  bool strict_objects = false;  // an object the topology drops or re-grids fails the verdict
  ReportPaths reports;
};

nlohmann::json FatesJson(const std::vector<ObjectFate>& fates) {
  nlohmann::json out = nlohmann::json::array();
  for (const ObjectFate& f : fates)
    out.push_back({{"key", f.key}, {"fate", f.fate}, {"detail", f.detail}});
  return out;
}

// Metadata-only verdict per topology: 0 every topology loads, 1 some would
// not, 2 bad input or (--data) a damaged byte.
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
      // Torch's records without an item index: read whole (the chunks touched).
      std::cout << IndexHint(Env::Default(), args.dir, r.chunk_bytes, r.bytes_needed, args.dir,
                             fmt::format("a load under {} would read", t));
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

}  // namespace

Command AddVerifyCommand(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* verify = app.add_subcommand(
      "verify", "would a checkpoint load under a topology? (metadata only; --data: every byte)");
  verify->add_option("dir", args->dir, "checkpoint directory (native or DCP)")->required();
  verify->add_option("--topology,-t", args->topologies, "topology (repeatable)")->required();
  AddSpecOptions(verify, args->spec, args->sets);
  verify->add_option("--strict", args->strict, "strict handling mode (default: the spec's)");
  verify->add_option("--saved-topology", args->saved_topology,
                     "topology the checkpoint was saved under (default: recorded in it)");
  verify->add_flag("--data", args->data,
                   "also read every stored byte once and check every checksum");
  verify
      ->add_flag("--require-checksums", args->require_checksums,
                 "with --data: fail (exit 1) when anything carries no checksum to check")
      ->needs("--data");
  verify->add_flag("--strict-objects", args->strict_objects,
                   "fail a topology under which a stored object (rng_state, rerun or "
                   "dataloader state) would be dropped or re-gridded");
  AddIndexDirOption(verify, args->index_dir);
  AddReportOptions(verify, args->reports, "topology");
  return {verify, [args](CommandLine&) {
            UseIndexDir(args->index_dir);
            ResolveRunRoot(args->dir);
            return VerifyCommand(*args);
          }};
}

}  // namespace distckpt
