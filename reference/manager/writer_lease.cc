#include "manager/writer_lease.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/json_parse.h"
#include "manager/layout.h"

namespace distckpt {
namespace {

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// The start time of process `pid` (clock ticks since boot, /proc/PID/stat's
// 22nd field), or -1 when it does not run (or there is no /proc): with the
// pid, it names one process (a pid alone is reused; 32768 of them go fast).
int64_t ProcessStart(int64_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoll(field.c_str(), nullptr, 10);
  }
  return -1;
}

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct LeaseRecord {
  std::string holder, run, host;
  int64_t pid = 0, renewed = 0, ttl = 0;
  int64_t start = -1;  // the holder's ProcessStart (-1: not recorded)
};

std::optional<LeaseRecord> ReadLease(Env* env, const std::string& path) {
  if (!env->FileExists(path)) return std::nullopt;
  std::string text;
  try {
    text = ReadFileToString(env, path);
  } catch (const CheckpointError& e) {
    if (!env->FileExists(path)) return std::nullopt;  // released meanwhile
    throw;
  }
  nlohmann::json j = ParseJson(text, path);
  LeaseRecord r;
  try {
    r.holder = j.at("holder").get<std::string>();
    r.run = j.at("run").get<std::string>();
    r.host = j.at("host").get<std::string>();
    r.pid = j.at("pid").get<int64_t>();
    r.renewed = j.at("renewed_unix").get<int64_t>();
    r.ttl = j.at("ttl_s").get<int64_t>();
    if (j.contains("process_start")) r.start = j.at("process_start").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kCorruption, "writer lease {}: {} (remove it if no run writes this root)", path,
         e.what());
  }
  return r;
}

// Held by a live writer: renewed within its ttl, and not a dead process of
// this host (its pid gone, or now another process's).
bool Live(const LeaseRecord& r) {
  if (NowSeconds() - r.renewed > r.ttl) return false;
  if (r.host == HostName() && r.pid > 0) {
    if (::kill(static_cast<pid_t>(r.pid), 0) != 0 && errno == ESRCH) return false;
    if (r.start >= 0 && ProcessStart(r.pid) != r.start) return false;
  }
  return true;
}

}  // namespace

std::string WriterLease::Contents() const {
  return nlohmann::json{{"holder", holder_},
                        {"run", run_},
                        {"host", HostName()},
                        {"pid", static_cast<int64_t>(::getpid())},
                        {"process_start", ProcessStart(::getpid())},
                        {"renewed_unix", NowSeconds()},
                        {"ttl_s", static_cast<int64_t>(options_.ttl.count())},
                        {"writer", "distckpt"}}
             .dump() +
         "\n";
}

std::unique_ptr<WriterLease> WriterLease::Acquire(Env* env, const std::string& root,
                                                  const LeaseOptions& options) {
  std::unique_ptr<WriterLease> lease(new WriterLease);
  lease->env_ = env;
  lease->options_ = options;
  lease->holder_ = fmt::format("pid {} on host {}", ::getpid(), HostName());
  const std::string what =
      fmt::format("checkpoint root {} is held by another writer (one writer per root)", root);
  env->CreateDirs(root);
  if (env->capabilities().locks) {
    lease->path_ = JoinPath(root, kWriterLockFile);
    lease->lock_ = env->LockFile(lease->path_, what);
    return lease;
  }
  lease->path_ = JoinPath(root, kWriterLeaseFile);
  std::random_device rd;
  lease->run_ = fmt::format("{:08x}{:08x}", rd(), rd());
  if (std::optional<LeaseRecord> held = ReadLease(env, lease->path_); held && Live(*held)) {
    Fail(ErrorKind::kInvalidArgument,
         "{} ({}, lease {} renewed {} s ago, ttl {} s): wait for it, or choose another root "
         "(nothing was changed)",
         what, held->holder, lease->path_, NowSeconds() - held->renewed, held->ttl);
  }
  WriteFileAtomic(env, lease->path_, lease->Contents());
  std::this_thread::sleep_for(options.settle);
  std::optional<LeaseRecord> now = ReadLease(env, lease->path_);
  if (!now || now->run != lease->run_) {
    lease->released_ = true;  // not ours: never removed by us
    Fail(ErrorKind::kInvalidArgument, "{} ({}, lease {}, taken while this run took it)", what,
         now ? now->holder : std::string("a writer that released it"), lease->path_);
  }
  return lease;
}

void WriterLease::Renew() {
  if (lost_) Fail(ErrorKind::kInvalidArgument, "writer lease {} was taken over", path_);
  if (lock_ || released_) return;
  std::optional<LeaseRecord> now = ReadLease(env_, path_);
  if (!now || now->run != run_) {
    lost_ = released_ = true;  // never removed by us
    Fail(ErrorKind::kInvalidArgument,
         "writer lease {} was taken over by {}: this run stopped writing the root", path_,
         now ? now->holder : std::string("nobody (it was removed)"));
  }
  WriteFileAtomic(env_, path_, Contents());
}

void WriterLease::Release() {
  if (lock_) {
    lock_.reset();
    return;
  }
  if (released_) return;
  released_ = true;
  try {
    std::optional<LeaseRecord> now = ReadLease(env_, path_);
    if (now && now->run == run_) env_->RemoveFile(path_);
  } catch (...) {
  }
}

WriterLease::~WriterLease() { Release(); }

}  // namespace distckpt
