#include "strategy/local_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"

namespace distckpt {
namespace {

constexpr std::string_view kDirty = ".dirty";

// (iteration, owner) of "iter_<i>_<o>_local.bin" with an optional ".dirty".
std::optional<LocalFileId> ParseName(std::string_view name, bool* dirty) {
  *dirty = name.ends_with(kDirty);
  if (*dirty) name.remove_suffix(kDirty.size());
  if (!name.starts_with("iter_") || !name.ends_with("_local.bin")) return std::nullopt;
  name.remove_prefix(5);
  name.remove_suffix(10);
  const size_t sep = name.find('_');
  if (sep == std::string_view::npos) return std::nullopt;
  LocalFileId id;
  auto iter = std::from_chars(name.data(), name.data() + sep, id.iteration);
  auto owner = std::from_chars(name.data() + sep + 1, name.data() + name.size(), id.owner);
  if (iter.ec != std::errc() || iter.ptr != name.data() + sep || owner.ec != std::errc() ||
      owner.ptr != name.data() + name.size() || id.iteration < 0 || id.owner < 0) {
    return std::nullopt;
  }
  return id;
}

constexpr std::string_view kCommitSuffix = "_commit.json";

std::string CommitFileName(int64_t iteration) {
  return fmt::format("iter_{:07d}{}", iteration, kCommitSuffix);
}

// The iteration of "iter_<i>_commit.json".
std::optional<int64_t> ParseCommitName(std::string_view name) {
  if (!name.starts_with("iter_") || !name.ends_with(kCommitSuffix)) return std::nullopt;
  name.remove_prefix(5);
  name.remove_suffix(kCommitSuffix.size());
  int64_t iteration = -1;
  auto r = std::from_chars(name.data(), name.data() + name.size(), iteration);
  if (r.ec != std::errc() || r.ptr != name.data() + name.size() || iteration < 0) {
    return std::nullopt;
  }
  return iteration;
}

}  // namespace

std::string LocalFileName(LocalFileId id) {
  return fmt::format("iter_{:07d}_{}_local.bin", id.iteration, id.owner);
}

std::optional<LocalFileId> ParseLocalFileName(std::string_view name) {
  bool dirty;
  std::optional<LocalFileId> id = ParseName(name, &dirty);
  return dirty ? std::nullopt : id;
}

LocalStore::LocalStore(Env* env, std::string root, int holder)
    : env_(env), dir_(JoinPath(root, std::to_string(holder))) {}

void LocalStore::Write(LocalFileId id, std::span<const std::byte> blob) {
  env_->CreateDirs(dir_);
  const std::string path = JoinPath(dir_, LocalFileName(id));
  const std::string dirty = path + std::string(kDirty);  // a crashed save's is overwritten
  std::unique_ptr<WritableFile> file = env_->NewWritableFile(dirty);
  file->Append(blob);
  file->Sync();
  file->Close();
  env_->RenameFile(dirty, path);
  env_->SyncDir(dir_);
}

std::string LocalStore::Read(LocalFileId id) const {
  return ReadFileToString(env_, JoinPath(dir_, LocalFileName(id)));
}

std::vector<LocalFileId> LocalStore::List() const {
  std::vector<LocalFileId> ids;
  if (!env_->IsDirectory(dir_)) return ids;
  for (const std::string& name : env_->ListDir(dir_)) {
    if (auto id = ParseLocalFileName(name)) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void LocalStore::WriteCommit(int64_t iteration, int world) {
  env_->CreateDirs(dir_);
  WriteFileAtomic(env_, JoinPath(dir_, CommitFileName(iteration)),
                  nlohmann::json({{"iteration", iteration}, {"world", world}}).dump());
}

std::map<int64_t, int> LocalStore::Commits() const {
  std::map<int64_t, int> commits;
  if (!env_->IsDirectory(dir_)) return commits;
  for (const std::string& name : env_->ListDir(dir_)) {
    std::optional<int64_t> iteration = ParseCommitName(name);
    if (!iteration) continue;
    const std::string path = JoinPath(dir_, name);
    const std::string text = ReadFileToString(env_, path);
    CheckJsonDepth(text, path);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("iteration") || !j.contains("world") ||
        !j["iteration"].is_number_integer() || !j["world"].is_number_integer() ||
        j["iteration"].get<int64_t>() != *iteration || j["world"].get<int64_t>() < 1 ||
        j["world"].get<int64_t>() > (int64_t{1} << 20)) {
      Fail(ErrorKind::kCorruption, "local checkpoint commit record {} is malformed", path);
    }
    commits[*iteration] = j["world"].get<int>();
  }
  return commits;
}

void LocalStore::RemoveIteration(int64_t iteration) {
  RemoveIf([&](int64_t i) { return i == iteration; });
}

void LocalStore::RemoveOlderThan(int64_t iteration) {
  RemoveIf([&](int64_t i) { return i < iteration; });
}

void LocalStore::RemoveIf(const std::function<bool(int64_t iteration)>& pred) {
  if (!env_->IsDirectory(dir_)) return;
  for (const std::string& name : env_->ListDir(dir_)) {
    bool dirty;
    auto id = ParseName(name, &dirty);
    std::optional<int64_t> commit = ParseCommitName(name);
    if ((id && pred(id->iteration)) || (commit && pred(*commit))) {
      env_->RemoveFile(JoinPath(dir_, name));
    }
  }
}

}  // namespace distckpt
