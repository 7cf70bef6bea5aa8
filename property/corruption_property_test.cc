// Property 8: format robustness. Any single-byte change or truncation of a
// committed native checkpoint (a data file or metadata.json) is either
// loaded correctly or rejected with a CheckpointError on every rank: never a
// crash, a hang, another exception type, or wrong values.
//
// The load runs with VerifyPolicy::kAlways (`distckpt load --verify always`:
// every chunk read is read whole and its checksum checked; the default policy
// checks only chunks read whole, so a flipped byte inside a partially read
// chunk would be loaded as a wrong value by design) and strict raise_all (a
// flipped key is a key mismatch, not a silently missing tensor). It runs in a
// forked child, so a crash or a hang is reported as a counterexample too; the
// child's address space is capped so a corrupted size cannot exhaust memory.
//
// The counterexample file holds the scenario with the damage as its pair's
// `damage` (and `verify: always`, `strict: raise_all`, `expect:
// loaded_or_refused`), so `distckpt run FILE` replays it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <typeinfo>

#include "comm/thread_world.h"
#include "core/error.h"
#include "engine/load.h"
#include "format/format.h"
#include "harness/expand/expand.h"
#include "harness/expand/fp8_section.h"
#include "harness/run/damage.h"
#include "io/env.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/steps.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

struct Damage {
  bool metadata = false;  // the format's index (metadata.json, DCP's .metadata), else another file
  uint64_t file_pick = 0, position = 0;
  bool truncate = false;
  int change = 0;     // 0: flip one bit, 1: any byte, 2: a digit of metadata.json's numbers
  uint8_t value = 0;  // bit number, byte or digit
};

// A format's files: its index (what a load opens first) and the others
// (data files; DCP: also Megatron's common.pt and metadata.json).
std::string IndexFile(const std::string& format) {
  return format == "native" ? "metadata.json" : ".metadata";
}

// The concrete damage `d` picks in checkpoint `dir` of `format` (nullopt: nothing to damage).
std::optional<DamageSpec> Pick(const Damage& d, const std::string& dir, const std::string& format) {
  std::vector<std::string> others;
  for (const std::string& name : Env::Default()->ListDir(dir)) {
    if (name != IndexFile(format)) others.push_back(name);
  }
  DamageSpec out;
  out.file = d.metadata || others.empty() ? IndexFile(format) : others[d.file_pick % others.size()];
  const std::string bytes = ReadFileToString(Env::Default(), (fs::path(dir) / out.file).string());
  if (bytes.empty()) return std::nullopt;
  uint64_t at = d.position % bytes.size();
  const bool digit = d.change == 2 && out.file == "metadata.json";
  if (digit) {  // the (position mod count)-th digit: offsets, shapes, lengths, ranges
    std::vector<uint64_t> digits;
    for (uint64_t i = 0; i < bytes.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(bytes[i]))) digits.push_back(i);
    }
    at = digits[d.position % digits.size()];
  }
  if (d.truncate) {
    out.truncate = static_cast<int64_t>(at);
    return out;
  }
  const auto old = static_cast<uint8_t>(bytes[at]);
  out.at = static_cast<int64_t>(at);
  out.value = d.change == 0 ? old ^ static_cast<uint8_t>(1u << (d.value % 8))
              : digit       ? static_cast<uint8_t>('0' + d.value % 10)
                            : d.value;
  if (out.value == old) return std::nullopt;
  return out;
}

// What the forked load reports back: its verdict and a message.
enum Verdict : int {
  kLoaded = 0,
  kRejected = 10,
  kWrongValues = 20,
  kOtherException = 30,
  kSplit = 40
};

// Child: loads under the pair's load topology, checks every element; writes
// "rank R: <message>" to `fd` and exits with the verdict.
void LoadAndCheck(const Scenario& s, const std::string& dir, int fd) {
  const PairSpec& pair = s.pairs[0];
  const Topology saved = Topology::Parse(pair.save), topo = Topology::Parse(pair.load);
  std::vector<int> verdict(topo.world_size(), kLoaded);
  std::vector<std::string> message(topo.world_size());
  RunRanksCollect(topo.world_size(), [&](Communicator& comm) {
    const int r = comm.rank();
    try {
      LoadOptions options;
      options.verify = pair.verify;
      options.strict = *pair.strict;
      LoadResult loaded = Load(BuildLoadRequest(s, &pair, saved, topo, r), dir, comm, options);
      std::optional<std::string> bad = CheckLoaded(s, &pair, saved, topo, r, loaded);
      if (!bad && !s.fp8.empty()) bad = CheckFp8Loaded(s, &pair, topo, r, loaded.state_dict).error;
      if (bad) {
        verdict[r] = kWrongValues;
        message[r] = *bad;
      }
    } catch (const CheckpointError& e) {
      verdict[r] = kRejected;
      message[r] = fmt::format("{}\t{}", ErrorKindName(e.kind()), e.what());
    } catch (const std::exception& e) {
      verdict[r] = kOtherException;
      message[r] = fmt::format("{}: {}", typeid(e).name(), e.what());
    }
  });
  int worst = kLoaded;
  std::string text;
  for (int r = 0; r < topo.world_size(); ++r) {
    if (verdict[r] > worst || (verdict[r] == worst && text.empty() && !message[r].empty())) {
      worst = verdict[r];
      text = fmt::format("rank {}: {}", r, message[r]);
    }
  }
  if (worst == kRejected && std::count(verdict.begin(), verdict.end(), kLoaded) > 0) {
    worst = kSplit;
    text = "some ranks loaded, others failed: " + text;
  }
  if (write(fd, text.data(), text.size()) < 0) _exit(99);
  _exit(worst);
}

// The forked child's body: never returns into the parent's code (an exception
// escaping here, e.g. a rank thread that cannot start under the address-space
// cap, would otherwise run the rest of the property in the child).
[[noreturn]] void LoadInChild(const Scenario& s, const std::string& dir, int fd) {
  rlimit limit{4ull << 30, 4ull << 30};
  setrlimit(RLIMIT_AS, &limit);
  alarm(60);
  std::string text;
  try {
    LoadAndCheck(s, dir, fd);
  } catch (const std::exception& e) {
    text = fmt::format("the load's process failed outside the ranks: {}: {}", typeid(e).name(),
                       e.what());
  } catch (...) {
    text = "the load's process failed outside the ranks: unknown exception";
  }
  if (write(fd, text.data(), text.size()) < 0) _exit(99);
  _exit(kOtherException);
}

// "rank R: <kind>\t<message>" -> "<kind>".
std::string ErrorKindOf(const std::string& rejection) {
  const size_t from = rejection.find(": ") + 2;
  return rejection.substr(from, rejection.find('\t') - from);
}

// Runs the load in a child process; (verdict, message).
std::pair<int, std::string> LoadForked(const Scenario& s, const std::string& dir) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {-1, "pipe failed"};
  std::cout.flush();  // the child must not write the parent's buffered output again
  const pid_t pid = fork();
  if (pid < 0) {  // not a load that passed: waitpid(-1) would report some other process
    const int error = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return {-1, fmt::format("could not fork the load: {}", strerror(error))};
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    LoadInChild(s, dir, pipe_fds[1]);
  }
  close(pipe_fds[1]);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) text.append(buffer, n);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return {-1, fmt::format("waitpid failed: {}", strerror(errno))};
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return {-1, signal == SIGALRM ? "the load hung (killed after 60 s)"
                                  : fmt::format("the load crashed: {}", strsignal(signal))};
  }
  return {WEXITSTATUS(status), text};
}

void CheckDamagedCheckpoints(const std::string& format, int cases) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.max_world = 6;
  limits.max_tensors = 2;
  limits.max_elements = 256;
  limits.flatten_off_grid = format == "native";  // DCP cannot store those (refused at save)
  const std::string replay = format == "native" ? "" : "--format " + format;
  CheckProperty(
      {cases,
       {{"rejected", 0.3},
        // Native v2 checksums its metadata and every block a load reads, so a
        // damaged native checkpoint almost never loads (2 in 1,000): the
        // minimum holds for DCP, whose .metadata has no checksum.
        {"loaded", format == "native" ? 0.0 : 0.01},
        {"index-file", 0.3},
        {"data-file", 0.2},
        {"truncate", 0.1}},
       nullptr,
       replay},
      [&] {
        Scenario s = *GenReshardScenario(limits);
        Damage d;
        d.metadata = OneIn(2);
        d.file_pick = Choose(64);
        d.position = *Uniform(1u << 20);
        d.truncate = OneIn(5);
        d.change = static_cast<int>(Choose(3));
        d.value = static_cast<uint8_t>(Choose(256));
        const std::string dir = (fs::path(work) / "ckpt").string();
        fs::remove_all(dir);
        SetCase(s);
        if (auto e = SaveScenario(s, s.pairs[0].save, dir, format)) FailCase(s, *e);
        PairSpec& pair = s.pairs[0];
        pair.damage = Pick(d, dir, format);
        RC_PRE(pair.damage.has_value());
        pair.verify = VerifyPolicy::kAlways;
        pair.strict = StrictHandling::kRaiseAll;
        pair.expect_loaded_or_refused = true;
        const std::string what = ApplyDamage(*pair.damage, dir);
        const bool index = pair.damage->file == IndexFile(format);
        const bool data =
            !index && pair.damage->file.find('_') == 0;  // __<rank>_<stream>.bin/.distcp
        Tag({index  ? "index-file"
             : data ? "data-file"
                    : "other-file",
             d.truncate               ? "truncate"
             : d.change == 2 && index ? "digit"
                                      : "byte"});
        const std::string note = fmt::format(
            "After the save under {}: {}; the load under {} (--verify always --strict raise_all) "
            "must load every element right or fail with an error (exit 2). `distckpt run FILE{}{}` "
            "replays it (the pair's `damage`).",
            pair.save, what, pair.load, replay.empty() ? "" : " ", replay);
        SetCase(s, note);
        const auto [verdict, message] = LoadForked(s, dir);
        if (verdict == kLoaded) {
          Tag({"loaded"});
        } else if (verdict == kRejected) {
          Tag({"rejected", ErrorKindOf(message)});
        } else {
          FailCase(s, fmt::format("{}: verdict {}: {}", what, verdict, message), note);
        }
      });
  fs::remove_all(work);
}

TEST(CorruptionProperty, DamagedCheckpointLoadsCorrectlyOrIsRejected) {
  CheckDamagedCheckpoints("native", 1000);
}

// The same for PyTorch DCP checkpoints: the .metadata pickle, the torch.save
// zip items of the .distcp files, Megatron's common.pt and metadata.json.
TEST(CorruptionProperty, DamagedDcpCheckpointLoadsCorrectlyOrIsRejected) {
  CheckDamagedCheckpoints("dcp", 500);
}

}  // namespace
}  // namespace distckpt
