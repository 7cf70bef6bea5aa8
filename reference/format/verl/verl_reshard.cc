#include "format/verl/verl_reshard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/box.h"
#include "core/error.h"
#include "core/json_integer.h"
#include "core/tensor.h"
#include "format/dcp/pickler.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"
#include "format/verl/fsdp1_flat.h"
#include "format/verl/verl_files.h"
#include "fsdp/layout.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

struct Whole {
  Tensor data;
  int64_t filled = 0;
};

// Every tensor of every rank, assembled whole.
std::map<std::string, Whole> Assemble(const std::vector<VerlRankState>& ranks,
                                      const std::string& src) {
  std::map<std::string, Whole> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const ShardedTensor& t : ranks[r].tensors) {
      if (!IsMainReplica(t.replica_id)) continue;
      Whole& w = out[t.key];
      if (!w.data.defined()) w.data = Tensor::Zeros(t.dtype, t.global_shape);
      if (w.data.dtype() != t.dtype || w.data.shape() != t.global_shape) {
        Fail(ErrorKind::kCorruption, "{}: '{}' of rank {} is {} {}, rank 0's {} {}", src, t.key, r,
             DTypeName(t.dtype), ShapeToString(t.global_shape), DTypeName(w.data.dtype()),
             ShapeToString(w.data.shape()));
      }
      const Box whole{Shape(t.global_shape.size(), 0), t.global_shape};
      const Box chunk{t.global_offset, t.local_shape};
      const size_t elem = DTypeSize(t.dtype);
      std::byte* dst = w.data.data();
      const std::byte* from = t.data.data();
      ForEachCopyRun(whole, std::nullopt, chunk, t.flattened_range, chunk, [&](const CopyRun& run) {
        std::memcpy(dst + run.a_index * elem, from + run.b_index * elem, run.count * elem);
        w.filled += run.count;
      });
    }
  }
  for (const auto& [key, w] : out) {
    if (w.filled != w.data.numel()) {
      Fail(ErrorKind::kIncomplete, "{}: the ranks hold {} of the {} elements of '{}'", src,
           w.filled, w.data.numel(), key);
    }
  }
  return out;
}

struct Mesh {
  std::string device_type = "cpu";
  std::vector<std::string> dim_names = {"fsdp"};
  std::string group_tag = "ptd:0", group_name = "0";
};

// One archive being written: its pickle and its storages.
class ArchiveOut {
 public:
  PickleWriter w;
  std::string Storage(Tensor t) {
    std::string key = std::to_string(storages_.size());
    storages_.push_back(std::move(t));
    return key;
  }
  void Tensor_(const Tensor& t) {
    const std::string key = Storage(t);
    EmitTorchTensor(w, t.dtype(), t.shape(), t.nbytes(), key);
  }
  std::string Finish() {
    std::string pickle = w.Finish();
    return ZipToString([&](ZipWriter& zip) {
      zip.AddRecord("data.pkl", pickle);
      zip.AddRecord("byteorder", "little");
      for (size_t i = 0; i < storages_.size(); ++i) {
        zip.AddRecord("data/" + std::to_string(i), storages_[i].bytes());
      }
      zip.AddRecord("version", "3\n");
    });
  }

 private:
  std::vector<Tensor> storages_;
};

Shape Strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// torch.chunk's piece `rank` of `full` along `dim` over `world`.
Tensor Chunk(const Tensor& full, int dim, int world, int rank) {
  if (full.shape().empty()) return full;
  const FlatRange rows = Fsdp2Rows(full.shape()[dim], world, rank);
  Box box{Shape(full.shape().size(), 0), full.shape()};
  box.offset[dim] = rows.start;
  box.shape[dim] = rows.size();
  return full.Slice(box);
}

// A DTensor as torch 2.6 pickles one (torch._tensor._rebuild_from_type_v2 of
// a wrapper subclass with _local_tensor and _spec).
void EmitDTensor(ArchiveOut& a, const Tensor& full, int dim, int world, int rank,
                 const Mesh& mesh) {
  PickleWriter& w = a.w;
  const Shape& global = full.shape();
  const std::string dtype(TorchDTypeName(full.dtype()));
  const Tensor local = Chunk(full, dim, world, rank);
  w.Reduce([&] { w.Global("torch._tensor", "_rebuild_from_type_v2"); }, 4,
           [&] {
             w.Global("torch._utils", "_rebuild_wrapper_subclass");
             w.Global("torch.distributed.tensor", "DTensor");
             w.Tuple(8, [&] {
               w.Global("torch.distributed.tensor", "DTensor");
               w.Global("torch", dtype);
               w.TupleOfInts(global);
               w.TupleOfInts(Strides(global));
               w.Int(0);
               w.Reduce([&] { w.Global("torch.serialization", "_get_layout"); }, 1,
                        [&] { w.Str("torch.strided"); });
               w.Reduce([&] { w.Global("torch", "device"); }, 1, [&] { w.Str("cpu"); });
               w.Bool(false);
             });
             w.Tuple(2, [&] {
               w.None();
               w.Dict(false, [&] {
                 w.Str("_local_tensor");
                 a.Tensor_(local);
                 w.Str("_spec");
                 w.Object("torch.distributed.tensor._dtensor_spec", "DTensorSpec", [&] {
                   w.Dict(false, [&] {
                     w.Str("mesh");
                     w.Object("torch.distributed.device_mesh", "DeviceMesh", [&] {
                       w.Dict(false, [&] {
                         w.Str("device_type");
                         w.Str(mesh.device_type);
                         w.Str("mesh");
                         Tensor ranks = Tensor::Empty(DType::kI32, {world});
                         for (int r = 0; r < world; ++r) ranks.data_as<int32_t>()[r] = r;
                         a.Tensor_(ranks);
                         w.Str("mesh_dim_names");
                         w.Tuple(mesh.dim_names.size(), [&] {
                           for (const std::string& n : mesh.dim_names) w.Str(n);
                         });
                         w.Str("_flatten_mesh_list");
                         Shape all(world);
                         for (int r = 0; r < world; ++r) all[r] = r;
                         w.TupleOfInts(all);
                         w.Str("_thread_id");
                         w.None();
                         w.Str("_dim_group_infos");
                         w.List(false, [&] {
                           w.Tuple(3, [&] {
                             w.Str(mesh.group_tag);
                             w.List(world == 0, [&] {
                               for (int r = 0; r < world; ++r) w.Int(r);
                             });
                             w.Str(mesh.group_name);
                           });
                         });
                         w.Str("_coordinate_on_dim");
                         w.List(false, [&] { w.Int(rank); });
                         w.Str("_hash");
                         w.None();  // DeviceMesh.__hash__ recomputes a falsy _hash
                       });
                     });
                     w.Str("placements");
                     w.Tuple(1, [&] {
                       w.Object("torch.distributed.tensor.placement_types", "Shard", [&] {
                         w.Dict(false, [&] {
                           w.Str("dim");
                           w.Int(dim);
                         });
                       });
                     });
                     w.Str("tensor_meta");
                     w.Reduce(
                         [&] { w.Global("torch.distributed.tensor._dtensor_spec", "TensorMeta"); },
                         3,
                         [&] {
                           w.TorchSize(global);
                           w.TupleOfInts(Strides(global));
                           w.Global("torch", dtype);
                         });
                     w.Str("_hash");
                     w.None();
                   });
                 });
               });
             });
           });
}

void EmitScalar(ArchiveOut& a, const nlohmann::json& v) {
  if (!v.is_number()) {
    a.w.Json(v);
    return;
  }
  Tensor t = Tensor::Empty(DType::kF32, {});
  // A double past float's range converts to infinity (a cast of it is undefined).
  const double d = v.get<double>();
  t.data_as<float>()[0] = std::fabs(d) > std::numeric_limits<float>::max()
                              ? std::copysign(std::numeric_limits<float>::infinity(), d)
                              : static_cast<float>(d);
  a.Tensor_(t);
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) Fail(ErrorKind::kIo, "cannot write {}", path.string());
}

// verl's get_shard_placement_fn: the first dim divisible by the world, else 0.
int Fsdp2Dim(const Shape& shape, int world) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] % world == 0) return static_cast<int>(i);
  }
  return 0;
}

int SourceFsdpVersion(const std::string& src, const VerlRankState& r0) {
  const fs::path config = fs::path(src) / "fsdp_config.json";
  if (fs::is_regular_file(fs::symlink_status(config))) {
    std::ifstream f(config);
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_object() && j.contains("FSDP_version") && j["FSDP_version"].is_number_integer()) {
      return JsonInteger<int>(j["FSDP_version"], config.string() + ": FSDP_version");
    }
  }
  return r0.common.contains("optimizer") && r0.common["optimizer"].contains("fsdp1_units") ? 1 : 2;
}

void ReshardComponent(const std::string& src, const fs::path& dst, const VerlReshardOptions& o,
                      VerlReshardReport& report, const std::string& name) {
  const int from = VerlWorldSize(src);
  const int to = o.world_size;
  std::vector<VerlRankState> ranks;
  for (int r = 0; r < from; ++r) ranks.push_back(ReadVerlRank(src, from, r));
  const VerlRankState& r0 = ranks[0];
  const int from_fsdp = SourceFsdpVersion(src, r0);
  const int to_fsdp = o.fsdp_version ? o.fsdp_version : from_fsdp;
  Mesh mesh;
  if (r0.mesh.is_object()) {
    if (r0.mesh.value("dims", 1) != 1) {
      Fail(ErrorKind::kUnsupported, "{}: a device mesh of {} dimensions (HSDP) is not resharded",
           src, r0.mesh.value("dims", 1));
    }
    mesh.device_type = r0.mesh.value("device_type", mesh.device_type);
    if (r0.mesh.contains("mesh_dim_names")) {
      mesh.dim_names = r0.mesh["mesh_dim_names"].get<std::vector<std::string>>();
    }
    mesh.group_tag = r0.mesh.value("group_tag", mesh.group_tag);
    mesh.group_name = r0.mesh.value("group_name", mesh.group_name);
  }
  std::map<std::string, Whole> whole = Assemble(ranks, src);
  const std::vector<std::string>& keys = r0.state_keys;  // the parameters (tied: once)
  std::vector<int64_t> numels;
  for (const std::string& k : keys) numels.push_back(whole.at(k).data.numel());

  // The optimizer: param groups as FQN lists, per-FQN scalars.
  const bool has_optim = r0.common.contains("optimizer");
  nlohmann::json groups = nlohmann::json::array();
  std::vector<std::vector<std::string>> group_fqns;
  nlohmann::json scalars = nlohmann::json::object();
  std::vector<std::string> state_names;  // tensor states, in first-seen order
  if (has_optim) {
    const nlohmann::json& opt = r0.common["optimizer"];
    groups = opt.at("param_groups");
    scalars = opt.value("state", nlohmann::json::object());
    std::vector<std::vector<std::string>> by_index;  // source index position -> FQNs
    if (opt.contains("fsdp1_units")) {
      for (const auto& u : opt["fsdp1_units"])
        by_index.push_back(u.get<std::vector<std::string>>());
    } else {
      for (const std::string& k : keys) by_index.push_back({k});
    }
    size_t n = 0;
    for (const auto& g : groups) {
      std::vector<std::string> fqns;
      for (size_t i = 0; i < g.at("params").size(); ++i, ++n) {
        if (n >= by_index.size()) {
          Fail(ErrorKind::kCorruption, "{}: param_groups list more parameters than the model", src);
        }
        fqns.insert(fqns.end(), by_index[n].begin(), by_index[n].end());
      }
      group_fqns.push_back(std::move(fqns));
    }
    for (const auto& [key, w] : whole) {
      constexpr std::string_view kPrefix = "optimizer.state.";
      if (!key.starts_with(kPrefix)) continue;
      const std::string rest = key.substr(kPrefix.size());
      const std::string state = rest.substr(0, rest.find('.'));
      if (std::find(state_names.begin(), state_names.end(), state) == state_names.end()) {
        state_names.push_back(state);
      }
    }
  }
  auto state_of = [&](const std::string& state, const std::string& fqn) -> const Tensor* {
    auto it = whole.find("optimizer.state." + state + "." + fqn);
    return it == whole.end() ? nullptr : &it->second.data;
  };

  // FSDP1 target units.
  std::vector<Fsdp1Unit> units;
  if (to_fsdp == 1) {
    if (has_optim && r0.common["optimizer"].contains("fsdp1_units")) {
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < keys.size(); ++i) index[keys[i]] = i;
      for (const auto& u : r0.common["optimizer"]["fsdp1_units"]) {
        Fsdp1Unit unit;
        for (const auto& f : u) {
          unit.params.push_back(index.at(f.get<std::string>()));
          unit.total += numels[unit.params.back()];
        }
        units.push_back(std::move(unit));
      }
    } else {
      units = DefaultFsdp1Units(keys, numels);
    }
    if (has_optim && groups.size() != 1) {
      Fail(ErrorKind::kUnsupported,
           "{}: {} parameter groups: FSDP1's flat parameters are written for one group only", src,
           groups.size());
    }
  }

  fs::create_directories(dst);
  for (int n = 0; n < to; ++n) {
    {                // model
      ArchiveOut a;  // a dict (torch's load_state_dict takes any mapping)
      a.w.Dict(r0.model_keys.empty(), [&] {
        for (const std::string& k : r0.model_keys) {
          const Tensor& t = whole.at(k).data;
          a.w.Str(k);
          // A buffer: every rank holds it whole. FSDP1 on one rank (NO_SHARD)
          // saves plain tensors too (verl#903).
          if ((to_fsdp == 1 && to == 1) ||
              std::find(r0.param_keys.begin(), r0.param_keys.end(), k) == r0.param_keys.end()) {
            a.Tensor_(t);
          } else {
            EmitDTensor(a, t, to_fsdp == 1 ? 0 : Fsdp2Dim(t.shape(), to), to, n, mesh);
          }
        }
      });
      WriteFile(dst / VerlModelFile(to, n), a.Finish());
    }
    if (has_optim) {
      ArchiveOut a;
      PickleWriter& w = a.w;
      w.Dict(false, [&] {
        w.Str("state");
        if (to_fsdp == 2) {
          std::map<std::string, size_t> index;
          for (size_t i = 0; i < keys.size(); ++i) index[keys[i]] = i;
          w.Dict(false, [&] {
            for (size_t i = 0; i < keys.size(); ++i) {
              const std::string& fqn = keys[i];
              const bool any = scalars.contains(fqn) || [&] {
                for (const std::string& s : state_names) {
                  if (state_of(s, fqn)) return true;
                }
                return false;
              }();
              if (!any) continue;
              w.Int(static_cast<int64_t>(i));
              w.Dict(false, [&] {
                if (scalars.contains(fqn)) {
                  for (const auto& [sname, v] : scalars[fqn].items()) {
                    w.Str(sname);
                    EmitScalar(a, v);
                  }
                }
                for (const std::string& s : state_names) {
                  if (const Tensor* t = state_of(s, fqn)) {
                    w.Str(s);
                    EmitDTensor(a, *t, Fsdp2Dim(t->shape(), to), to, n, mesh);
                  }
                }
              });
            }
          });
        } else {
          w.Dict(units.empty(), [&] {
            for (size_t u = 0; u < units.size(); ++u) {
              w.Int(static_cast<int64_t>(u));
              const std::string& first = keys[units[u].params[0]];
              w.Dict(false, [&] {
                if (scalars.contains(first)) {
                  for (const auto& [sname, v] : scalars[first].items()) {
                    for (size_t p : units[u].params) {
                      if (!scalars.contains(keys[p]) || scalars[keys[p]].value(sname, v) != v) {
                        Fail(ErrorKind::kUnsupported,
                             "{}: '{}' differs between '{}' and '{}' of one FSDP1 unit", src, sname,
                             first, keys[p]);
                      }
                    }
                    w.Str(sname);
                    EmitScalar(a, v);
                  }
                }
                for (const std::string& s : state_names) {
                  const int64_t shard = Fsdp1ShardSize(units[u].total, to);
                  bool found = false;
                  Tensor flat;
                  for (const Fsdp1Piece& piece : Fsdp1RankPieces(units[u], numels, to, n)) {
                    const Tensor* t = state_of(s, keys[piece.param]);
                    if (!t) continue;
                    if (!found) {
                      flat = Tensor::Zeros(t->dtype(), {shard});
                      found = true;
                    }
                    const size_t elem = DTypeSize(t->dtype());
                    std::memcpy(flat.data() + piece.in_shard.start * elem,
                                t->data() + piece.in_param.start * elem,
                                piece.in_param.size() * elem);
                  }
                  if (!found) {  // a rank holding only padding of this unit
                    const Tensor* t = state_of(s, keys[units[u].params[0]]);
                    if (!t) continue;
                    flat = Tensor::Zeros(t->dtype(), {shard});
                  }
                  w.Str(s);
                  a.Tensor_(flat);
                }
              });
            }
          });
        }
        w.Str("param_groups");
        w.List(groups.empty(), [&] {
          for (size_t g = 0; g < groups.size(); ++g) {
            nlohmann::json group = groups[g];
            nlohmann::json params = nlohmann::json::array();
            if (to_fsdp == 1) {
              for (size_t u = 0; u < units.size(); ++u) params.push_back(u);
            } else {
              // torch's load_state_dict pairs saved and current parameters by
              // position: a group lists them in model (parameters()) order.
              std::vector<int64_t> ids;
              for (const std::string& f : group_fqns[g]) {
                ids.push_back(std::find(keys.begin(), keys.end(), f) - keys.begin());
              }
              std::sort(ids.begin(), ids.end());
              for (int64_t i : ids) params.push_back(i);
            }
            group["params"] = params;
            w.Json(group);
          }
        });
      });
      WriteFile(dst / VerlOptimFile(to, n), a.Finish());
    }
    const fs::path extra = fs::path(src) / VerlExtraFile(from, n % from);
    if (fs::is_regular_file(fs::symlink_status(extra))) {
      fs::copy_file(extra, dst / VerlExtraFile(to, n));
    }
  }
  WriteFile(dst / "fsdp_config.json",
            nlohmann::json({{"FSDP_version", to_fsdp}, {"world_size", to}}).dump(4));
  // Anything else verl keeps beside the rank files (huggingface/, ...).
  static const std::regex rank_file(R"((model|optim|extra_state)_world_size_\d+_rank_\d+\.pt)");
  for (const fs::directory_entry& e : fs::directory_iterator(src)) {
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, rank_file) || f == "fsdp_config.json" || e.is_symlink()) continue;
    fs::copy(e.path(), dst / f, fs::copy_options::recursive);
  }
  report.lines.push_back(fmt::format(
      "{}: FSDP{} world size {} -> FSDP{} world size {} ({} parameters, {} tied "
      "aliases, {} buffers{})",
      name, from_fsdp, from, to_fsdp, to, keys.size(), r0.param_keys.size() - keys.size(),
      r0.model_keys.size() - r0.param_keys.size(), has_optim ? ", optimizer state" : ""));
  if (fs::exists(fs::path(src) / VerlExtraFile(from, 0))) {
    report.lines.push_back(fmt::format(
        "{}: extra_state (lr_scheduler, RNG) of rank n is source rank n mod {}'s: kept for ranks "
        "0..{}{}{}",
        name, from, std::min(from, to) - 1,
        to > from ? fmt::format("; regridded for ranks {}..{} (their RNG streams repeat those of "
                                "ranks 0..{})",
                                from, to - 1, std::min(from, to - from) - 1)
                  : "",
        from > to ? fmt::format("; dropped: the RNG states of source ranks {}..{}", to, from - 1)
                  : ""));
  }
}

bool IsComponent(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with("model_world_size_")) return true;
  }
  return false;
}

}  // namespace

VerlReshardReport ReshardVerl(const std::string& src, const std::string& dst,
                              const VerlReshardOptions& o) {
  if (o.world_size < 1 || o.world_size > 1000000) {
    Fail(ErrorKind::kInvalidArgument, "--world-size {}: must be at least 1", o.world_size);
  }
  if (o.fsdp_version != 0 && o.fsdp_version != 1 && o.fsdp_version != 2) {
    Fail(ErrorKind::kInvalidArgument, "--fsdp {}: 1 or 2", o.fsdp_version);
  }
  if (fs::exists(fs::symlink_status(dst))) {
    Fail(ErrorKind::kInvalidArgument, "{} exists: reshard writes a new directory, never over one",
         dst);
  }
  if (!fs::is_directory(src)) Fail(ErrorKind::kInvalidArgument, "{} is not a directory", src);
  VerlReshardReport report;
  try {
    if (IsComponent(src)) {
      ReshardComponent(src, dst, o, report, fs::path(src).filename().string());
    } else {
      std::vector<fs::path> components, files;
      for (const fs::directory_entry& e : fs::directory_iterator(src)) {
        if (e.is_symlink()) continue;
        (e.is_directory() && IsComponent(e.path()) ? components : files).push_back(e.path());
      }
      if (components.empty()) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: neither a verl FSDP checkpoint (model_world_size_W_rank_r.pt) nor a step "
             "folder holding some (actor/, critic/)",
             src);
      }
      std::sort(components.begin(), components.end());
      for (const fs::path& c : components) {
        ReshardComponent(c.string(), fs::path(dst) / c.filename(), o, report,
                         c.filename().string());
      }
      for (const fs::path& f : files) {
        fs::copy(f, fs::path(dst) / f.filename(), fs::copy_options::recursive);
        if (f.filename() == "data.pt") {
          report.lines.push_back(
              "data.pt (dataloader state: one per step, not per rank): kept unchanged");
        }
      }
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dst, ec);
    throw;
  }
  return report;
}

}  // namespace distckpt
