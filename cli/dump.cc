// distckpt dump: one global tensor of a checkpoint (any format), written as
// its row-major elements in the stored dtype, little-endian, no header; or
// one object (its unique key; "common_state/shard_0_1" the common state a
// DCP checkpoint keeps as an object) as stored: the record of a format that
// has them (DCP: the torch.save archive of its item), else its JSON text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"  // internal: dump prints the stored state as read
#include "format/format.h"

namespace distckpt {

namespace {

void WriteFile(const std::string& out, std::string_view bytes) {
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) Fail(ErrorKind::kIo, "cannot write {}", out);
}

// The object `unique_key` as stored; nullopt if the checkpoint holds no such object.
std::optional<std::string> StoredObjectBytes(CheckpointReader& reader,
                                             const std::string& unique_key) {
  std::shared_ptr<const ObjectRecord> record;
  if (auto it = reader.metadata().objects.find(unique_key); it != reader.metadata().objects.end()) {
    record = reader.ReadObjectRecord(it->second);
    if (!record) return reader.ReadObject(it->second);
  } else if (ShardedObject{kCommonStateKey, {}, {1}, {0}}.UniqueKey() == unique_key) {
    record = reader.CommonRecord();
  }
  if (!record) return std::nullopt;
  return record->bytes;
}

// Levenshtein distance of `a` and `b`, or `limit` when it is at least that
// (rows stop early: a checkpoint may hold 100,000 keys).
size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) >= limit) return limit;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0], smallest = row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
      smallest = std::min(smallest, row[j]);
    }
    if (smallest >= limit) return limit;
  }
  return std::min(row[b.size()], limit);
}

// The (at most) kNearestKeys stored names nearest `key`, nearest first, in
// name order among equals: what a "no such key" error shows instead of every
// name (one line of 100,000 names helps nobody).
constexpr size_t kNearestKeys = 5;
template <typename Map>
std::vector<std::string> NearestKeys(const Map& stored, const std::string& key) {
  std::vector<std::pair<size_t, std::string>> best;  // (distance, name), sorted
  for (const auto& [name, unused] : stored) {
    const size_t limit = best.size() < kNearestKeys ? SIZE_MAX : best.back().first;
    const size_t d = EditDistance(name, key, limit);
    if (d >= limit) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), std::pair{d, name}), {d, name});
    if (best.size() > kNearestKeys) best.pop_back();
  }
  std::vector<std::string> names;
  for (auto& [d, name] : best) names.push_back(std::move(name));
  return names;
}

int DumpCommand(const std::string& dir, const std::string& key, const std::string& out) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  if (!md.tensors.contains(key)) {
    if (std::optional<std::string> bytes = StoredObjectBytes(*reader, key)) {
      WriteFile(out, *bytes);
      std::cout << fmt::format("{}: object {}, {} bytes as stored written to {}\n", dir, key,
                               bytes->size(), out);
      return kExitOk;
    }
    Fail(ErrorKind::kKeyMismatch,
         "{} holds no tensor '{}' and no object of that unique key (nearest of its {} tensors: {})",
         dir, key, md.tensors.size(), fmt::join(NearestKeys(md.tensors, key), ", "));
  }
  // The whole tensor as one unsharded request: every stored chunk is read
  // and the chunks must cover the tensor exactly once.
  CheckTensorStored(*reader, md.tensors.at(key));  // before a buffer of its claimed size
  Dict request{{key, LoadTensorsMetadata(dir, env).at(key)}};
  Node loaded =
      ReadShardedState(*reader, Node(std::move(request)), VerifyPolicy::kWhenWhole, nullptr);
  const Tensor& tensor = loaded.at(key).as<Tensor>();
  WriteFile(out, std::string_view(reinterpret_cast<const char*>(tensor.data()), tensor.nbytes()));
  std::cout << fmt::format("{}: {} {} {}, {} bytes written to {}\n", dir, key,
                           DTypeName(tensor.dtype()), ShapeToString(tensor.shape()),
                           tensor.nbytes(), out);
  return kExitOk;
}

struct DumpArgs {
  std::string dir, key, out;
};

}  // namespace

Command AddDumpCommand(CLI::App& app) {
  auto args = std::make_shared<DumpArgs>();
  CLI::App* dump =
      app.add_subcommand("dump",
                         "write one global tensor (little-endian, stored dtype), or one object "
                         "as stored, to a file");
  dump->add_option("dir", args->dir, "checkpoint directory (native or DCP)")->required();
  dump->add_option("key", args->key, "tensor key, or an object's unique key")->required();
  dump->add_option("--out,-o", args->out, "output file")->required();
  return {dump, [args](CommandLine&) {
            ResolveRunRoot(args->dir);
            return DumpCommand(args->dir, args->key, args->out);
          }};
}

}  // namespace distckpt
