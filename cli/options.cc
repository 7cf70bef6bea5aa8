#include "cli/options.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/default_scenario.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "format/format.h"
#include "format/verl/verl_megatron.h"
#include "harness/tools/request_spec.h"
#include "io/env.h"
#include "io/storage_path.h"
#include "manager/catalog.h"
#include "topology/topology.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace distckpt {
namespace {

#ifdef DISTCKPT_HAVE_MPI
// `save|load|reshard --backend mpi` started outside mpirun: the command runs
// itself again as `mpirun -np <world of --topology> distckpt <same arguments>`
// (as `run --backend mpi` launches its jobs), passing stdout, stderr and the
// exit code through. Inside a job Open MPI sets OMPI_COMM_WORLD_SIZE.
// nullopt: nothing to launch (already in a job, or a world of one).
std::optional<int> RelaunchUnderMpirun(int argc, char** argv, const std::string& topology) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || topology.empty()) return std::nullopt;
  const int world = Topology::Parse(topology).world_size();
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
    Fail(ErrorKind::kIo, "cannot start mpirun (is Open MPI installed?)");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kExitInputError;
}
#endif  // DISTCKPT_HAVE_MPI

}  // namespace

// --comm: which communicator carries a load's exchange.
void AddCommOption(CLI::App* cmd, StepOptions& step, const char* help) {
  cmd->add_option_function<std::string>(
         "--comm", [&step](const std::string& comm) { step.nccl = comm == "nccl"; }, help)
      ->check(CLI::IsMember({"default", "nccl"}));
}

void AddReportOptions(CLI::App* cmd, ReportPaths& paths, const char* per) {
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
  if (std::optional<std::string> dir = TrackedIterationDir(Env::Default(), path)) {
    std::cerr << "note: " << path << " is a training run's root: reading " << *dir
              << ", the checkpoint its tracker names\n";
    path = *dir;
  }
  std::string component;
  if (std::optional<std::string> dist = VerlMegatronDistCkpt(Env::Default(), path, &component)) {
    std::cerr << "note: " << path << " holds verl's Megatron checkpoint " << component
              << ": reading " << *dist << "\n";
    path = *dist;
  }
}

// Every checkpoint path of every command takes a URI too (io/storage_path.h):
// file:///p is the path /p; s3://bucket/key stays a URI, reached through
// UriEnv() (a build without libcurl refuses it); an unknown scheme is refused
// naming it (exit 2) before anything runs.
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
            StoragePath where = EnvForPath(text);
            // s3://: every command's Env::Default() routes by path from here on.
            if (where.env != PosixStorage()) SetDefaultEnv(UriEnv());
            text = where.path;
            return "";
          } catch (const CheckpointError& e) {
            return e.what();
          }
        },
        "", "storage path"));
  }
  for (CLI::App* cmd : app.get_subcommands({})) StoragePaths(*cmd);
}

int OnBackend(CommandLine& line, const std::string& backend, const std::string* topology,
              const std::function<int()>& command) {
  if (backend != "mpi") return command();
#ifdef DISTCKPT_HAVE_MPI
  if (topology != nullptr) {
    if (std::optional<int> rc = RelaunchUnderMpirun(line.argc, line.argv, *topology)) return *rc;
  }
  MpiSession session(&line.argc, &line.argv);
#else
  (void)line;
  (void)topology;
#endif
  return command();
}

void RunOnBackend(const std::string& backend, int world,
                  const std::function<void(Communicator&)>& fn) {
  if (backend == "threads") {
    RunRanks(world, fn);
    return;
  }
  if (backend != "mpi")
    Fail(ErrorKind::kInvalidArgument, "unknown backend '{}' (threads or mpi)", backend);
#ifdef DISTCKPT_HAVE_MPI
  std::unique_ptr<Communicator> comm = MpiWorld();
  if (comm->size() != world) {
    Fail(ErrorKind::kInvalidArgument, "the topology needs {} ranks but mpirun started {}", world,
         comm->size());
  }
  fn(*comm);
#else
  Fail(ErrorKind::kUnsupported, "this distckpt was built without MPI");
#endif
}

Scenario LoadScenario(const std::string& path) {
  if (!path.empty()) return Scenario::FromFile(path);
  return Scenario::FromJson(nlohmann::json::parse(kDefaultScenarioJson, nullptr, true, true),
                            "<embedded default scenario>");
}

// --device and --comm: a device this machine has, and NCCL only where it
// has work (a fully parallel or two-stage load on CUDA tensors).
void CheckStepDevice(const StepOptions& step) {
  CheckDeviceUsable(step.device == "cuda" ? Device::Cuda() : Device::Parse(step.device));
  if (!step.nccl) return;
  if (step.device == "cpu") {
    Fail(ErrorKind::kInvalidArgument, "--comm nccl needs --device cuda");
  }
  if (step.load.kind == LoadStrategy::Kind::kPlain) {
    Fail(ErrorKind::kInvalidArgument,
         "--comm nccl carries the exchange of --fully-parallel or --two-stage loads");
  }
}

std::string Ratio(uint64_t a, uint64_t b) {
  return b ? fmt::format("{:.3f}", double(a) / double(b)) : "-";
}

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

}  // namespace distckpt
