#include "format/verl/verl_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "core/json_integer.h"
#include "core/json_parse.h"
#include "format/dcp/allow_list.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"
#include "format/dcp/unpickler.h"
#include "format/verl/fsdp1_flat.h"
#include "fsdp/layout.h"
#include "io/env.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// Through Env's open, as every checkpoint file: a FIFO, a device or a
// symbolic link (to /dev/zero, or out of the directory) is refused, not read.
// A rank's file that is not there leaves the checkpoint incomplete.
// (A dangling link is POSIX's only: it is there, and refused when opened.)
bool Present(Env* env, const std::string& path) {
  return env->FileExists(path) || (env == Env::Default() && fs::is_symlink(path));
}

std::string ReadWholeFile(Env* env, const std::string& path) {
  if (!Present(env, path)) {
    Fail(ErrorKind::kIncomplete, "{} is missing: not a complete verl checkpoint", path);
  }
  return ReadFileToString(env, path);
}

// One torch.save archive, unpickled with the verl allow-list.
struct Archive {
  Archive(Env* env, std::string path_in)
      : path(std::move(path_in)), bytes(ReadWholeFile(env, path)), zip(bytes, path) {
    UnpickleLimits limits;
    limits.allow_global = IsAllowedVerlGlobal;
    tree = Unpickle(zip.ReadRecord(zip.Get("data.pkl")), path + ": data.pkl", limits);
  }
  std::string path;
  std::string bytes;
  ZipReader zip;
  PyTree tree;
};

const PyValue& Need(const PyValue* v, const std::string& what) {
  if (!v) Fail(ErrorKind::kCorruption, "{}: missing", what);
  return *v;
}

// The tensor `t` of `archive`, row-major.
Tensor ReadTorchTensor(const Archive& a, const TorchTensor& t, const std::string& what) {
  const ZipReader::Entry* entry = a.zip.Find("data/" + t.storage_key);
  if (!entry) Fail(ErrorKind::kCorruption, "{}: storage data/{} is missing", what, t.storage_key);
  std::string storage = a.zip.ReadRecord(*entry);
  if (storage.size() < t.storage_bytes) {
    Fail(ErrorKind::kCorruption, "{}: storage data/{} holds {} bytes, expected {}", what,
         t.storage_key, storage.size(), t.storage_bytes);
  }
  Tensor out = Tensor::Empty(t.dtype, t.size);
  GatherRowMajor(t, std::as_bytes(std::span(storage.data(), storage.size())), out.data());
  return out;
}

// A rebuilt DTensor: _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor,
// (cls, dtype, size, stride, offset, layout, device, requires_grad), state).
bool IsDTensor(const PyValue& v) {
  return v.kind == PyKind::kObject && v.IsInstance("torch._tensor", "_rebuild_from_type_v2");
}

// The parts of a DeviceMesh's state a writer of the same run needs.
nlohmann::json MeshInfo(const PyValue& mesh, size_t dims) {
  nlohmann::json j = {{"dims", dims}};
  if (const PyValue* d = mesh.Field("device_type"); d && d->kind == PyKind::kStr) {
    j["device_type"] = d->text;
  }
  if (const PyValue* n = mesh.Field("mesh_dim_names"); n && n->kind == PyKind::kTuple) {
    nlohmann::json names = nlohmann::json::array();
    for (const PyValue* x : n->items) {
      if (x->kind == PyKind::kStr) names.push_back(x->text);
    }
    j["mesh_dim_names"] = names;
  }
  if (const PyValue* g = mesh.Field("_dim_group_infos");
      g && g->kind == PyKind::kList && !g->items.empty() && g->items[0]->kind == PyKind::kTuple &&
      g->items[0]->items.size() == 3 && g->items[0]->items[0]->kind == PyKind::kStr &&
      g->items[0]->items[2]->kind == PyKind::kStr) {
    j["group_tag"] = g->items[0]->items[0]->text;
    j["group_name"] = g->items[0]->items[2]->text;
  }
  return j;
}

ShardedTensor ReadDTensor(const Archive& a, const PyValue& v, const std::string& key, int rank,
                          nlohmann::json* mesh_info = nullptr) {
  const std::string what = fmt::format("{}: '{}'", a.path, key);
  const auto& args = PyToSequence(Need(v.args, what), what);
  if (args.size() != 4 || !args[0]->Is("torch._utils", "_rebuild_wrapper_subclass") ||
      !(args[1]->Is("torch.distributed.tensor", "DTensor") ||
        args[1]->Is("torch.distributed._tensor.api", "DTensor"))) {
    Fail(ErrorKind::kUnsupported, "{}: a tensor subclass other than DTensor", what);
  }
  const auto& wrapper = PyToSequence(*args[2], what + " wrapper");
  if (wrapper.size() < 3) Fail(ErrorKind::kCorruption, "{}: short DTensor wrapper", what);
  const Shape global = PyToShape(*wrapper[2], what + " size");
  // The state is the instance dict, or (dict or None, slots dict) for a class with __slots__.
  const PyValue* state_v = args[3];
  if (state_v->kind == PyKind::kTuple && state_v->items.size() == 2) {
    state_v = state_v->items[1]->kind == PyKind::kDict ? state_v->items[1] : state_v->items[0];
  }
  const PyValue& state = *state_v;
  std::optional<TorchTensor> local =
      AsTorchTensor(Need(state.Get("_local_tensor"), what + " _local_tensor"), what);
  if (!local) Fail(ErrorKind::kCorruption, "{}: _local_tensor is not a tensor", what);
  const PyValue& spec = Need(state.Get("_spec"), what + " _spec");
  if (!spec.IsInstance("torch.distributed.tensor._dtensor_spec", "DTensorSpec")) {
    Fail(ErrorKind::kCorruption, "{}: _spec is not a DTensorSpec", what);
  }
  const PyValue& mesh = Need(spec.Field("mesh"), what + " mesh");
  std::optional<TorchTensor> mesh_tensor =
      AsTorchTensor(Need(mesh.Field("mesh"), what + " mesh"), what);
  if (!mesh_tensor) Fail(ErrorKind::kCorruption, "{}: the device mesh has no mesh tensor", what);
  const Shape mesh_shape = mesh_tensor->size;
  if (mesh_info && mesh_info->is_null()) *mesh_info = MeshInfo(mesh, mesh_shape.size());
  const PyValue* coord_v = mesh.Field("_coordinate_on_dim");
  if (!coord_v || coord_v->kind == PyKind::kNone) {
    Fail(ErrorKind::kCorruption, "{}: rank {} is not in its device mesh", what, rank);
  }
  const Shape coord = PyToShape(*coord_v, what + " mesh coordinate");
  const auto& placements = PyToSequence(Need(spec.Field("placements"), what + " placements"), what);
  if (coord.size() != mesh_shape.size() || placements.size() != mesh_shape.size()) {
    Fail(ErrorKind::kCorruption, "{}: mesh of {} dims, coordinate {}, {} placements", what,
         mesh_shape.size(), ShapeToString(coord), placements.size());
  }
  for (size_t i = 0; i < mesh_shape.size(); ++i) {
    if (mesh_shape[i] < 1 || coord[i] < 0 || coord[i] >= mesh_shape[i]) {
      Fail(ErrorKind::kCorruption, "{}: coordinate {} is outside device mesh {}", what,
           ShapeToString(coord), ShapeToString(mesh_shape));
    }
  }
  Shape offset(global.size(), 0), size = global;
  int64_t replica = 0;
  for (size_t i = 0; i < placements.size(); ++i) {
    const PyValue& p = *placements[i];
    if (p.IsInstance("torch.distributed.tensor.placement_types", "Replicate")) {
      replica = replica * mesh_shape[i] + coord[i];
      continue;
    }
    if (!p.IsInstance("torch.distributed.tensor.placement_types", "Shard")) {
      Fail(ErrorKind::kUnsupported, "{}: placement {} (only Shard and Replicate)", what,
           p.GlobalName());
    }
    const int64_t dim = PyToInt(Need(p.Field("dim"), what + " Shard.dim"), what);
    if (dim < 0 || dim >= static_cast<int64_t>(global.size())) {
      Fail(ErrorKind::kCorruption, "{}: Shard({}) of a {}-d tensor", what, dim, global.size());
    }
    FlatRange rows = Fsdp2Rows(size[dim], mesh_shape[i], coord[i]);
    offset[dim] += rows.start;
    size[dim] = rows.size();
  }
  if (size != local->size) {
    Fail(ErrorKind::kUnsupported,
         "{}: local shape {} is not torch.chunk's {} for placements over mesh {} at {} (uneven "
         "DTensor)",
         what, ShapeToString(local->size), ShapeToString(size), ShapeToString(mesh_shape),
         ShapeToString(coord));
  }
  ShardedTensor t;
  t.key = key;
  t.dtype = local->dtype;
  t.global_shape = global;
  t.global_offset = offset;
  t.local_shape = size;
  t.replica_id = {0, 0, replica};
  t.data = ReadTorchTensor(a, *local, what);
  return t;
}

// A model or optimizer value that is a tensor: a DTensor shard, or a plain
// tensor (whole, main on rank 0). nullopt for other values.
std::optional<ShardedTensor> ReadTensorValue(const Archive& a, const PyValue& v,
                                             const std::string& key, int rank,
                                             nlohmann::json* mesh_info = nullptr) {
  if (IsDTensor(v)) return ReadDTensor(a, v, key, rank, mesh_info);
  const std::string what = fmt::format("{}: '{}'", a.path, key);
  std::optional<TorchTensor> plain = AsTorchTensor(v, what);
  if (!plain) return std::nullopt;
  ShardedTensor t;
  t.key = key;
  t.dtype = plain->dtype;
  t.global_shape = plain->size;
  t.global_offset = Shape(plain->size.size(), 0);
  t.local_shape = plain->size;
  t.replica_id = {0, 0, rank};
  t.data = ReadTorchTensor(a, *plain, what);
  return t;
}

std::string KeyText(const PyValue& k, const std::string& what) {
  if (k.kind == PyKind::kStr) return k.text;
  if (k.kind == PyKind::kInt) return std::to_string(k.integer);
  Fail(ErrorKind::kCorruption, "{}: a key that is neither str nor int", what);
}

// param_keys less tied aliases: an `...lm_head.weight` whose shard holds the
// same shape, dtype and bytes as an earlier `...embed_tokens.weight`'s.
std::vector<std::string> Untied(const VerlRankState& out) {
  const ShardedTensor* embed = nullptr;
  std::vector<std::string> keep;
  for (const std::string& k : out.param_keys) {
    const ShardedTensor* t = nullptr;
    for (const ShardedTensor& x : out.tensors) {
      if (x.key == k) t = &x;
    }
    if (t && k.ends_with("embed_tokens.weight") && !embed) embed = t;
    if (t && embed && k.ends_with("lm_head.weight") && t->dtype == embed->dtype &&
        t->global_shape == embed->global_shape && t->local_shape == embed->local_shape &&
        t->global_offset == embed->global_offset && t->data.Equals(embed->data)) {
      continue;
    }
    keep.push_back(k);
  }
  return keep;
}

// FSDP1 with use_orig_params=False (fsdp1_flat.h): the state of flat
// parameter i is a 1-D shard of unit i; each parameter's part of it becomes
// a flattened_range piece of optimizer.state.<name>.<fqn> (the whole
// parameter's shape), 0-d values (step) common state of every FQN of the
// unit. The units are recorded in common optimizer.fsdp1_units.
void ReadFsdp1FlatOptimizer(const Archive& optim, const PyValue& state,
                            const std::vector<int64_t>& indices, int world, int rank,
                            VerlRankState& out, nlohmann::json& common_state) {
  std::vector<std::string> keys;
  std::vector<int64_t> numels;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const std::string& k : out.state_keys) {
    for (const ShardedTensor& t : out.tensors) {
      if (t.key == k) {
        keys.push_back(k);
        numels.push_back(Volume(t.global_shape));
        shapes.push_back(t.global_shape);
        dtypes.push_back(t.dtype);
        break;
      }
    }
  }
  // Each flat parameter's state: name -> its value, and the shard size.
  std::vector<const PyValue*> per_index;
  std::vector<int64_t> shard_sizes;
  for (int64_t index : indices) {
    const PyValue* st = nullptr;
    for (const auto& [k, v] : state.entries) {
      if (k->kind == PyKind::kInt && k->integer == index) st = v;
    }
    if (!st || st->kind != PyKind::kDict) {
      Fail(ErrorKind::kCorruption,
           "{}: flat parameter {} has no state dict (FSDP1 flat optimizer state)", optim.path,
           index);
    }
    int64_t size = -1;
    for (const auto& [name_v, value] : st->entries) {
      const std::string what =
          fmt::format("{}: state {} '{}'", optim.path, index, KeyText(*name_v, optim.path));
      if (IsDTensor(*value)) {
        Fail(ErrorKind::kUnsupported, "{}: a DTensor in FSDP1 flat optimizer state", what);
      }
      std::optional<TorchTensor> t = AsTorchTensor(*value, what);
      if (!t || t->size.empty()) continue;
      if (t->size.size() != 1 || (size >= 0 && t->size[0] != size)) {
        Fail(ErrorKind::kCorruption,
             "{}: shape {} (FSDP1 flat state is one 1-D shard per unit, {} parameters in "
             "param_groups, {} model keys)",
             what, ShapeToString(t->size), indices.size(), keys.size());
      }
      size = t->size[0];
    }
    if (size < 0) {
      Fail(ErrorKind::kCorruption, "{}: flat parameter {} holds no 1-D state", optim.path, index);
    }
    per_index.push_back(st);
    shard_sizes.push_back(size);
  }
  const std::vector<Fsdp1Unit> units =
      InferFsdp1Units(keys, numels, shard_sizes, world, optim.path);
  nlohmann::json unit_json = nlohmann::json::array();
  for (size_t u = 0; u < units.size(); ++u) {
    nlohmann::json fqns = nlohmann::json::array();
    for (size_t p : units[u].params) fqns.push_back(keys[p]);
    unit_json.push_back(std::move(fqns));
    for (const auto& [name_v, value] : per_index[u]->entries) {
      const std::string name = KeyText(*name_v, optim.path);
      const std::string what = fmt::format("{}: state {} '{}'", optim.path, indices[u], name);
      std::optional<TorchTensor> t = AsTorchTensor(*value, what);
      if (!t || t->size.empty()) {
        nlohmann::json j = PyToJson(optim.zip, *value);
        if (j.is_object() && j.contains("__tensor__")) j = j["__tensor__"]["data"].at(0);
        for (size_t p : units[u].params) common_state[keys[p]][name] = j;
        continue;
      }
      const Tensor flat = ReadTorchTensor(optim, *t, what);
      for (const Fsdp1Piece& piece : Fsdp1RankPieces(units[u], numels, world, rank)) {
        ShardedTensor s;
        s.key = fmt::format("optimizer.state.{}.{}", name, keys[piece.param]);
        s.dtype = t->dtype;
        s.global_shape = shapes[piece.param];
        s.global_offset = Shape(s.global_shape.size(), 0);
        s.local_shape = s.global_shape;
        s.flattened_range = piece.in_param;
        s.replica_id = {0, 0, 0};
        s.data = flat.Slice(Box{{piece.in_shard.start}, {piece.in_shard.size()}});
        out.tensors.push_back(std::move(s));
      }
    }
  }
  out.common["fsdp1_units"] = std::move(unit_json);
}

}  // namespace

std::string VerlModelFile(int world, int rank) {
  return fmt::format("model_world_size_{}_rank_{}.pt", world, rank);
}
std::string VerlOptimFile(int world, int rank) {
  return fmt::format("optim_world_size_{}_rank_{}.pt", world, rank);
}
std::string VerlExtraFile(int world, int rank) {
  return fmt::format("extra_state_world_size_{}_rank_{}.pt", world, rank);
}

int VerlWorldSize(const std::string& dir, Env* env) {
  if (!env) env = Env::Default();
  static const std::regex pattern(R"(model_world_size_([0-9]{1,7})_rank_0\.pt)");
  std::vector<int> worlds;
  std::vector<std::string> names;
  try {
    names = env->ListDir(dir);
  } catch (const CheckpointError& e) {
    Fail(ErrorKind::kIncomplete, "verl checkpoint {}: {}", dir, e.what());
  }
  for (const std::string& name : names) {
    std::smatch m;
    if (std::regex_match(name, m, pattern)) worlds.push_back(std::stoi(m[1].str()));
  }
  if (worlds.empty()) {
    Fail(ErrorKind::kIncomplete, "{}: no model_world_size_W_rank_0.pt (not a verl FSDP checkpoint)",
         dir);
  }
  if (worlds.size() > 1) {
    Fail(ErrorKind::kCorruption, "{}: model files of several world sizes ({} and {})", dir,
         worlds[0], worlds[1]);
  }
  const std::string config = JoinPath(dir, "fsdp_config.json");
  if (Present(env, config)) {  // a link is refused when opened
    const std::string text = ReadWholeFile(env, config);
    CheckJsonDepth(text, config);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("world_size") ||
        !j["world_size"].is_number_integer()) {
      Fail(ErrorKind::kCorruption, "{}: no integer world_size", config);
    }
    // As int64_t: a world_size of 2^32 + 2 is not 2 (get<int>() truncated it).
    const int64_t world = JsonInteger<int64_t>(j["world_size"], config + ": world_size");
    if (world != worlds[0]) {
      Fail(ErrorKind::kCorruption, "{}: world_size {} but the model files are of world size {}",
           config, world, worlds[0]);
    }
  }
  return worlds[0];
}

std::string VerlCheckpointGap(const std::string& dir, std::vector<std::string>* contents,
                              int* world) {
  contents->clear();
  int w = 0;
  try {
    w = VerlWorldSize(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  *world = w;
  auto whole = [](const fs::path& p) -> std::string {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st)) return fmt::format("{} is missing", p.string());
    if (!fs::is_regular_file(st)) return fmt::format("{} is not a regular file", p.string());
    const uintmax_t size = fs::file_size(p, ec);
    if (ec || size < 22) return fmt::format("{} is truncated", p.string());
    std::ifstream in(p, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(size - 22));
    char eocd[4] = {};
    in.read(eocd, 4);
    if (!in || std::string_view(eocd, 4) != std::string_view("PK\x05\x06", 4)) {
      return fmt::format("{} is not a whole torch.save archive (no zip end record)", p.string());
    }
    return "";
  };
  const std::pair<const char*, std::string (*)(int, int)> kinds[] = {
      {"model", VerlModelFile}, {"optimizer", VerlOptimFile}, {"extra", VerlExtraFile}};
  for (const auto& [name, file] : kinds) {
    int present = 0;
    for (int r = 0; r < w; ++r)
      present += fs::exists(fs::symlink_status(fs::path(dir) / file(w, r)));
    if (present == 0 && std::string_view(name) != "model") continue;
    for (int r = 0; r < w; ++r) {
      if (std::string why = whole(fs::path(dir) / file(w, r)); !why.empty()) {
        return fmt::format("{} (rank {} of {}: {} files of {} ranks present)", why, r, w, name,
                           present);
      }
    }
    contents->push_back(name);
  }
  if (!fs::exists(fs::symlink_status(fs::path(dir) / "fsdp_config.json"))) {
    return fmt::format("{}/fsdp_config.json is missing (rank 0 writes it after its files)", dir);
  }
  const fs::path listed = fs::path(dir) / "ckpt_contents.json";
  if (fs::exists(fs::symlink_status(listed))) {
    try {
      const std::string text = ReadWholeFile(Env::Default(), listed.string());
      CheckJsonDepth(text, listed.string());
      nlohmann::json j = nlohmann::json::parse(text);
      if (j.is_object()) j = j.at("contents");
      for (const auto& c : j) {
        const std::string name = c.get<std::string>();
        if ((name == "model" || name == "optimizer" || name == "extra") &&
            std::find(contents->begin(), contents->end(), name) == contents->end()) {
          return fmt::format("{} lists '{}', whose files are missing", listed.string(), name);
        }
      }
    } catch (const std::exception& e) {
      return fmt::format("{} is unreadable: {}", listed.string(), e.what());
    }
  }
  return "";
}

VerlRankState ReadVerlRank(const std::string& dir, int world, int rank, Env* env) {
  if (!env) env = Env::Default();
  if (world < 1 || rank < 0 || rank >= world) {
    Fail(ErrorKind::kInvalidArgument, "verl checkpoint {}: rank {} of world {}", dir, rank, world);
  }
  VerlRankState out;
  out.common = nlohmann::json::object();
  {
    Archive model(env, JoinPath(dir, VerlModelFile(world, rank)));
    const PyValue& root = *model.tree.root();
    if (root.kind != PyKind::kDict) {
      Fail(ErrorKind::kCorruption, "{}: not a state dict ({})", model.path, PyKindName(root.kind));
    }
    for (const auto& [k, v] : root.entries) {
      std::string key = KeyText(*k, model.path);
      std::optional<ShardedTensor> t = ReadTensorValue(model, *v, key, rank, &out.mesh);
      if (!t) Fail(ErrorKind::kUnsupported, "{}: '{}' is not a tensor", model.path, key);
      out.model_keys.push_back(key);
      if (IsDTensor(*v)) out.param_keys.push_back(key);
      out.tensors.push_back(std::move(*t));
    }
  }
  if (out.param_keys.empty()) out.param_keys = out.model_keys;
  out.state_keys = out.param_keys;
  const std::string optim_path = JoinPath(dir, VerlOptimFile(world, rank));
  if (env->FileExists(optim_path)) {
    Archive optim(env, optim_path);
    const PyValue& root = *optim.tree.root();
    const PyValue* state = root.kind == PyKind::kDict ? root.Get("state") : nullptr;
    const PyValue* groups = root.kind == PyKind::kDict ? root.Get("param_groups") : nullptr;
    if (!state || state->kind != PyKind::kDict || !groups) {
      Fail(ErrorKind::kCorruption, "{}: not an optimizer state dict (state, param_groups)",
           optim.path);
    }
    std::vector<int64_t> indices;  // param_groups' parameter indices, in order
    for (const PyValue* g : PyToSequence(*groups, optim.path + " param_groups")) {
      for (const PyValue* i :
           PyToSequence(Need(g->Get("params"), optim.path + " params"), optim.path)) {
        indices.push_back(PyToInt(*i, optim.path + " params"));
      }
    }
    std::map<std::string, Shape> model_shape;
    for (const ShardedTensor& t : out.tensors) model_shape[t.key] = t.global_shape;
    nlohmann::json common_state = nlohmann::json::object();
    const std::vector<std::string> untied = Untied(out);
    out.state_keys = out.param_keys;
    if (untied.size() < out.param_keys.size() && indices.size() == untied.size()) {
      out.state_keys = untied;  // FSDP2 (or a flat FSDP1 unit per parameter), tied
    }
    if (indices.size() != out.state_keys.size()) {
      try {
        ReadFsdp1FlatOptimizer(optim, *state, indices, world, rank, out, common_state);
      } catch (const CheckpointError& e) {
        if (e.kind() != ErrorKind::kUnsupported || untied.size() == out.param_keys.size()) throw;
        out.state_keys = untied;  // FSDP1 holds a tied parameter once
        common_state = nlohmann::json::object();
        std::erase_if(out.tensors,
                      [](const ShardedTensor& t) { return t.key.starts_with("optimizer.state."); });
        ReadFsdp1FlatOptimizer(optim, *state, indices, world, rank, out, common_state);
      }
    } else {
      // Parameter index -> FQN: the indices of param_groups in order are the
      // model's parameters in order.
      std::map<int64_t, std::string> fqn;
      for (size_t n = 0; n < indices.size(); ++n) fqn[indices[n]] = out.state_keys[n];
      for (const auto& [k, per_param] : state->entries) {
        const int64_t index = PyToInt(*k, optim.path + " state index");
        auto it = fqn.find(index);
        if (it == fqn.end()) {
          Fail(ErrorKind::kCorruption, "{}: state of parameter {} is in no param group", optim.path,
               index);
        }
        if (per_param->kind != PyKind::kDict) {
          Fail(ErrorKind::kCorruption, "{}: state of parameter {} is not a dict", optim.path,
               index);
        }
        for (const auto& [name_v, value] : per_param->entries) {
          const std::string name = KeyText(*name_v, optim.path);
          const std::string key = fmt::format("optimizer.state.{}.{}", name, it->second);
          std::optional<ShardedTensor> t;
          const bool scalar = !IsDTensor(*value) && [&] {
            auto plain = AsTorchTensor(*value, optim.path);
            return !plain || plain->size.empty();
          }();
          if (!scalar) t = ReadTensorValue(optim, *value, key, rank);
          if (t) {
            // A plain tensor is the whole parameter's state (world size 1); a
            // 1-D piece of another shape is FSDP1's use_orig_params=True view.
            auto m = model_shape.find(it->second);
            if (m != model_shape.end() && t->global_shape != m->second) {
              Fail(ErrorKind::kUnsupported,
                   "{}: '{}' has shape {} but parameter '{}' is {} (FSDP1 use_orig_params=True "
                   "flat views are not read)",
                   optim.path, key, ShapeToString(t->global_shape), it->second,
                   ShapeToString(m->second));
            }
            out.tensors.push_back(std::move(*t));
          } else {
            nlohmann::json j = PyToJson(optim.zip, *value);
            // A 0-d tensor (Adam's step) is its one value.
            if (j.is_object() && j.contains("__tensor__")) j = j["__tensor__"]["data"].at(0);
            common_state[it->second][name] = std::move(j);
          }
        }
      }
    }
    nlohmann::json groups_json = PyToJson(optim.zip, *groups);
    out.common["optimizer"] = {{"param_groups", std::move(groups_json)},
                               {"state", std::move(common_state)}};
    if (out.common.contains("fsdp1_units")) {
      out.common["optimizer"]["fsdp1_units"] = std::move(out.common["fsdp1_units"]);
      out.common.erase("fsdp1_units");
    }
  }
  const std::string extra_path = JoinPath(dir, VerlExtraFile(world, rank));
  if (env->FileExists(extra_path)) {
    Archive extra(env, extra_path);
    out.common["extra_state"] = PyToJson(extra.zip, *extra.tree.root());
  }
  return out;
}

ShardedObject VerlExtraStateObject(const VerlRankState& state, int world, int rank) {
  ShardedObject o;
  o.key = "extra_state";
  o.data = state.common.value("extra_state", nlohmann::json());
  o.global_shape = {world};
  o.global_offset = {rank};
  o.replica_id = {0};
  return o;
}

}  // namespace distckpt
