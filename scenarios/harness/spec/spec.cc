#include "harness/spec/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "harness/spec/fp8_parse.h"
#include "harness/spec/limits.h"

namespace distckpt {
namespace {

using nlohmann::json;

// `v` as an integer from `min` to `max`; `what` names it in the error.
int64_t InRange(const json& v, int64_t min, int64_t max, const std::string& what) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(max)) ||
      v.get<int64_t>() < min || v.get<int64_t>() > max) {
    Fail(ErrorKind::kInvalidArgument, "{}: expected an integer from {} to {}", what, min, max);
  }
  return v.get<int64_t>();
}

// Reads fields of one JSON object, rejecting unknown ones.
class Fields {
 public:
  Fields(const json& j, std::string path, std::set<std::string> allowed)
      : j_(j), path_(std::move(path)) {
    if (!j.is_object()) Fail(ErrorKind::kInvalidArgument, "{}: expected an object", path_);
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!allowed.count(it.key())) {
        Fail(ErrorKind::kInvalidArgument, "{}: unknown field '{}'", path_, it.key());
      }
    }
  }
  bool has(const std::string& k) const { return j_.contains(k); }
  std::string at(const std::string& k) const { return path_ + "." + k; }
  const json& get(const std::string& k) const {
    if (!j_.contains(k)) Fail(ErrorKind::kInvalidArgument, "{}: missing field '{}'", path_, k);
    return j_.at(k);
  }
  std::string str(const std::string& k) const {
    const json& v = get(k);
    if (!v.is_string()) Fail(ErrorKind::kInvalidArgument, "{}: expected a string", at(k));
    return v.get<std::string>();
  }
  std::string str(const std::string& k, const std::string& dflt) const {
    return has(k) ? str(k) : dflt;
  }
  int64_t integer(const std::string& k, int64_t dflt) const {
    if (!has(k)) return dflt;
    // Not past INT64_MAX: an unsigned one of those wrapped to a negative.
    return InRange(j_.at(k), INT64_MIN, INT64_MAX, at(k));
  }
  // An integer from `min` to `max`, or `dflt` when absent.
  int64_t integer(const std::string& k, int64_t dflt, int64_t min, int64_t max) const {
    if (!has(k)) return dflt;
    return InRange(get(k), min, max, at(k));
  }
  bool boolean(const std::string& k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j_.at(k).is_boolean())
      Fail(ErrorKind::kInvalidArgument, "{}: expected true or false", at(k));
    return j_.at(k).get<bool>();
  }
  const json& array(const std::string& k) const {
    const json& v = get(k);
    if (!v.is_array()) Fail(ErrorKind::kInvalidArgument, "{}: expected an array", at(k));
    return v;
  }

 private:
  const json& j_;
  std::string path_;
};

// Re-raises parse errors of nested values with the JSON path prepended.
template <typename Fn>
auto AtPath(const std::string& path, Fn&& fn) {
  try {
    return fn();
  } catch (const CheckpointError& e) {
    if (std::string(e.what()).rfind(path, 0) == 0) throw;
    throw CheckpointError(e.kind(), path + ": " + e.what());
  }
}

std::vector<MeshDim> ParseDims(const json& v, const std::string& path) {
  std::vector<MeshDim> dims;
  if (v.is_string()) {
    dims.push_back(AtPath(path, [&] { return ParseMeshDim(v.get<std::string>()); }));
  } else if (v.is_array() && !v.empty()) {
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = path + "[" + std::to_string(i) + "]";
      if (!v[i].is_string()) Fail(ErrorKind::kInvalidArgument, "{}: expected a mesh dim name", p);
      dims.push_back(AtPath(p, [&] { return ParseMeshDim(v[i].get<std::string>()); }));
    }
  } else {
    Fail(ErrorKind::kInvalidArgument, "{}: expected a mesh dim or a non-empty list of them", path);
  }
  return dims;
}

std::vector<TensorSpec> ParseTensors(const json& v, const std::string& path) {
  if (!v.is_array()) Fail(ErrorKind::kInvalidArgument, "{}: expected an array", path);
  std::vector<TensorSpec> out;
  std::set<std::string> keys;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string p = path + "[" + std::to_string(i) + "]";
    out.push_back(ParseTensorSpec(v[i], p));
    if (!keys.insert(out.back().key).second) {
      Fail(ErrorKind::kInvalidArgument, "{}: duplicate tensor key '{}'", p, out.back().key);
    }
  }
  return out;
}

StrictHandling ParseStrictAt(const Fields& f, const std::string& k) {
  return AtPath(f.at(k), [&] { return ParseStrictHandling(f.str(k)); });
}

FsdpLayout ParseFsdpSection(const json& v, const std::string& path) {
  Fields f(v, path, {"layout"});
  return AtPath(f.at("layout"), [&] { return ParseFsdpLayout(f.str("layout")); });
}

// What an FSDP layout (the scenario's or a pair's load_fsdp) cannot shard is
// refused, naming the field: the distributed-optimizer formats (FSDP shards
// the optimizer state like its parameters, in model space) and the fp8
// section.
void CheckFsdpCombinations(const Scenario& s) {
  bool fsdp = s.fsdp != FsdpLayout::kNone;
  for (const PairSpec& p : s.pairs)
    fsdp = fsdp || p.load_fsdp.value_or(s.fsdp) != FsdpLayout::kNone;
  if (!fsdp) return;
  if (s.optimizer && s.optimizer->format != OptimFormat::kPlain &&
      s.optimizer->format != OptimFormat::kFullyReshardable) {
    Fail(ErrorKind::kInvalidArgument,
         "$.optimizer.format: '{}' cannot be combined with fsdp (FSDP shards the optimizer state "
         "like its parameters: use plain or fully_reshardable)",
         OptimFormatName(s.optimizer->format));
  }
  if (!s.fp8.empty()) {
    Fail(ErrorKind::kInvalidArgument, "$.fp8: fp8 tensors cannot be combined with fsdp");
  }
}

// A pair's deliberate damage: {"key", "kind", "rank", "axis", "by", "dtype"}.
BreakSpec ParseBreak(const json& v, const std::string& path) {
  Fields f(v, path, {"key", "kind", "rank", "axis", "by", "dtype"});
  BreakSpec b;
  b.key = f.str("key");
  b.kind = f.str("kind");
  b.rank = static_cast<int>(f.integer("rank", 0, INT32_MIN, INT32_MAX));  // 2^32 is not rank 0
  static const std::set<std::string> kKinds{"gap", "overlap", "shift", "dtype"};
  if (!kKinds.count(b.kind)) {
    Fail(ErrorKind::kInvalidArgument,
         "{}: kind must be \"gap\", \"overlap\", \"shift\" or \"dtype\"", f.at("kind"));
  }
  const bool shift = b.kind == "shift", dtype = b.kind == "dtype";
  for (const char* k : {"axis", "by"}) {
    if (f.has(k) && !shift)
      Fail(ErrorKind::kInvalidArgument, "{}: only for kind \"shift\"", f.at(k));
  }
  if (f.has("dtype") && !dtype)
    Fail(ErrorKind::kInvalidArgument, "{}: only for kind \"dtype\"", f.at("dtype"));
  b.axis = static_cast<int>(f.integer("axis", 0, INT32_MIN, INT32_MAX));
  b.by = f.integer("by", 1, -kMaxScenarioSize, kMaxScenarioSize);
  if (b.axis < 0) Fail(ErrorKind::kInvalidArgument, "{}: must be >= 0", f.at("axis"));
  if (dtype) b.dtype = AtPath(f.at("dtype"), [&] { return DTypeFromName(f.str("dtype")); });
  return b;
}

ReplicaKind ParseReplicaKind(const Fields& f, const std::string& k) {
  const std::string name = f.str(k, "megatron");
  for (ReplicaKind kind : {ReplicaKind::kMegatron, ReplicaKind::kReversed, ReplicaKind::kFlat}) {
    if (name == ReplicaKindName(kind)) return kind;
  }
  Fail(ErrorKind::kInvalidArgument, "{}: expected \"megatron\", \"reversed\" or \"flat\"", f.at(k));
}

DamageSpec ParseDamage(const json& v, const std::string& path) {
  Fields f(v, path, {"file", "at", "value", "truncate"});
  DamageSpec d;
  d.file = f.str("file");
  if (d.file.empty() || d.file == "." || d.file == ".." || d.file.find('/') != std::string::npos ||
      d.file.find('\\') != std::string::npos) {
    Fail(ErrorKind::kInvalidArgument, "{}: '{}' is not a file name inside the checkpoint directory",
         f.at("file"), d.file);
  }
  if (f.has("truncate") == (f.has("at") || f.has("value"))) {
    Fail(ErrorKind::kInvalidArgument, "{}: give either \"at\" and \"value\" or \"truncate\"", path);
  }
  if (f.has("truncate")) {
    d.truncate = f.integer("truncate", 0);
    if (*d.truncate < 0) Fail(ErrorKind::kInvalidArgument, "{}: must be >= 0", f.at("truncate"));
    return d;
  }
  d.at = f.integer("at", -1);
  if (d.at < 0) Fail(ErrorKind::kInvalidArgument, "{}: must be >= 0", f.at("at"));
  const int64_t value = f.integer("value", -1);
  if (value < 0 || value > 255)
    Fail(ErrorKind::kInvalidArgument, "{}: must be a byte, 0 to 255", f.at("value"));
  d.value = static_cast<uint8_t>(value);
  return d;
}

PairSpec ParsePair(const json& v, const std::string& path) {
  Fields f(v, path,
           {"save", "load", "strict", "expect", "load_extra", "load_drop", "break",
            "load_optimizer", "load_fsdp", "expect_missing", "expect_unexpected", "load_model",
            "damage", "verify", "resave"});
  PairSpec pair;
  pair.save = f.str("save");
  pair.load = f.str("load");
  AtPath(f.at("save"), [&] { return Topology::Parse(pair.save); });
  AtPath(f.at("load"), [&] { return Topology::Parse(pair.load); });
  if (f.has("strict")) pair.strict = ParseStrictAt(f, "strict");
  if (f.has("expect")) {
    const json& e = f.get("expect");
    if (e.is_string() && e.get<std::string>() == "ok") {
    } else if (e.is_string() && e.get<std::string>() == "loaded_or_refused") {
      pair.expect_loaded_or_refused = true;
    } else if (e.is_object()) {
      Fields ef(e, f.at("expect"), {"error"});
      pair.expect_error = ef.str("error");
    } else {
      Fail(ErrorKind::kInvalidArgument,
           "{}: expected \"ok\", \"loaded_or_refused\" or {{\"error\": \"...\"}}", f.at("expect"));
    }
  }
  if (f.has("load_extra")) pair.load_extra = ParseTensors(f.get("load_extra"), f.at("load_extra"));
  if (f.has("load_drop")) {
    const json& drops = f.array("load_drop");
    for (size_t i = 0; i < drops.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", f.at("load_drop"), i);
      if (drops[i].is_string()) {
        pair.load_drop.push_back(drops[i].get<std::string>());
        continue;
      }
      if (!drops[i].is_object()) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: expected a key or {{\"key\": ..., \"ranks\": [...]}}", at);
      }
      Fields df(drops[i], at, {"key", "ranks"});
      std::vector<int>& ranks = pair.load_drop_ranks[df.str("key")];
      const int world = Topology::Parse(pair.load).world_size();
      for (const json& r : df.array("ranks")) {
        if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= world) {
          Fail(ErrorKind::kInvalidArgument, "{}: expected ranks of the load topology {} (0 to {})",
               df.at("ranks"), pair.load, world - 1);
        }
        ranks.push_back(r.get<int>());
      }
    }
  }
  if (f.has("break")) pair.break_save = ParseBreak(f.get("break"), f.at("break"));
  if (f.has("load_model")) {
    pair.load_model = f.get("load_model");
    ApplyGptOverrides(GptConfig{}, pair.load_model, f.at("load_model"));  // reject bad fields early
  }
  if (f.has("load_optimizer")) {
    pair.load_optimizer = f.get("load_optimizer");
    ParseOptimizerConfig(pair.load_optimizer, f.at("load_optimizer"), {},
                         false);  // reject bad fields early
  }
  if (f.has("load_fsdp")) pair.load_fsdp = ParseFsdpSection(f.get("load_fsdp"), f.at("load_fsdp"));
  if (f.has("expect_missing")) pair.expect_missing = f.str("expect_missing");
  if (f.has("expect_unexpected")) pair.expect_unexpected = f.str("expect_unexpected");
  if (f.has("damage")) pair.damage = ParseDamage(f.get("damage"), f.at("damage"));
  if (f.has("verify"))
    pair.verify = AtPath(f.at("verify"), [&] { return ParseVerifyPolicy(f.str("verify")); });
  if (f.has("resave")) {
    const json& r = f.get("resave");
    if (r.is_boolean()) {
      pair.resave = r.get<bool>();
    } else if (r.is_object()) {
      Fields rf(r, f.at("resave"), {"load"});
      pair.resave = true;
      pair.resave_load = rf.str("load");
      AtPath(rf.at("load"), [&] { return Topology::Parse(*pair.resave_load); });
    } else {
      Fail(ErrorKind::kInvalidArgument, "{}: expected true, false or {{\"load\": \"<topology>\"}}",
           f.at("resave"));
    }
  }
  return pair;
}

}  // namespace

bool PairSpec::Drops(const std::string& key, int rank) const {
  if (std::count(load_drop.begin(), load_drop.end(), key)) return true;
  auto it = load_drop_ranks.find(key);
  return it != load_drop_ranks.end() && std::count(it->second.begin(), it->second.end(), rank);
}

std::string_view ReplicaKindName(ReplicaKind kind) {
  switch (kind) {
    case ReplicaKind::kReversed:
      return "reversed";
    case ReplicaKind::kFlat:
      return "flat";
    default:
      return "megatron";
  }
}

OptimizerConfig ParseOptimizerConfig(const json& v, const std::string& path, OptimizerConfig base,
                                     bool full) {
  Fields f(v, path,
           full ? std::set<std::string>{"kind", "format", "step", "uneven_step", "pad_divisor",
                                        "bucket_numel"}
                : std::set<std::string>{"pad_divisor", "bucket_numel"});
  if (full && f.str("kind", "adam") != "adam") {
    Fail(ErrorKind::kInvalidArgument, "{}: only \"adam\" is supported", f.at("kind"));
  }
  if (f.has("format")) {
    base.format = AtPath(f.at("format"), [&] { return ParseOptimFormat(f.str("format")); });
  }
  base.step = f.integer("step", base.step);
  base.uneven_step = f.boolean("uneven_step", base.uneven_step);
  base.pad_divisor = f.integer("pad_divisor", base.pad_divisor, 1, kMaxScenarioSize);
  base.bucket_numel = f.integer("bucket_numel", base.bucket_numel, 0, kMaxScenarioSize);
  return base;
}

TensorSpec ParseTensorSpec(const json& v, const std::string& path) {
  Fields f(v, path,
           {"key", "shape", "dtype", "shard", "split", "flatten", "flatten_jitter", "pad_multiple",
            "load_dtype", "replica", "stack", "glu"});
  TensorSpec t;
  t.key = f.str("key");
  if (t.key.empty()) Fail(ErrorKind::kInvalidArgument, "{}: empty key", f.at("key"));
  if (!f.has("shape")) {
    Fail(ErrorKind::kInvalidArgument,
         "{}: missing field 'shape' (it may be omitted only in a request spec given with a "
         "checkpoint: verify, reshard)",
         path);
  }
  for (const json& d : f.array("shape")) {
    t.shape.push_back(InRange(d, 0, kMaxScenarioSize, f.at("shape") + " sizes"));
  }
  t.dtype = AtPath(f.at("dtype"), [&] { return DTypeFromName(f.str("dtype", "f32")); });
  if (f.has("load_dtype")) {
    t.load_dtype = AtPath(f.at("load_dtype"), [&] { return DTypeFromName(f.str("load_dtype")); });
  }
  if (f.has("shard")) {
    const json& s = f.get("shard");
    if (!s.is_object()) Fail(ErrorKind::kInvalidArgument, "{}: expected an object", f.at("shard"));
    std::set<MeshDim> used;
    for (auto it = s.begin(); it != s.end(); ++it) {
      std::string p = f.at("shard") + "." + it.key();
      size_t consumed = 0;
      int axis = -1;
      try {
        axis = std::stoi(it.key(), &consumed);
      } catch (...) {
      }
      if (consumed != it.key().size() || axis < 0 || axis >= static_cast<int>(t.shape.size())) {
        Fail(ErrorKind::kInvalidArgument, "{}: '{}' is not an axis of shape {}", p, it.key(),
             ShapeToString(t.shape));
      }
      t.shard[axis] = ParseDims(it.value(), p);
      for (MeshDim d : t.shard[axis]) {
        if (!used.insert(d).second) {
          Fail(ErrorKind::kInvalidArgument, "{}: mesh dim {} splits two axes", p, MeshDimName(d));
        }
      }
    }
  }
  std::string split = f.str("split", "even");
  if (split == "even")
    t.split = SplitKind::kEven;
  else if (split == "chunk")
    t.split = SplitKind::kChunk;
  else
    Fail(ErrorKind::kInvalidArgument, "{}: expected \"even\" or \"chunk\"", f.at("split"));
  if (f.has("flatten")) {
    std::vector<MeshDim> dims = ParseDims(f.get("flatten"), f.at("flatten"));
    if (dims.size() != 1) Fail(ErrorKind::kInvalidArgument, "{}: one mesh dim", f.at("flatten"));
    for (const auto& [axis, sd] : t.shard) {
      for (MeshDim d : sd) {
        if (d == dims[0]) {
          Fail(ErrorKind::kInvalidArgument, "{}: {} already shards axis {}", f.at("flatten"),
               MeshDimName(d), axis);
        }
      }
    }
    t.flatten = dims[0];
  }
  t.flatten_jitter = f.boolean("flatten_jitter", false);
  t.replica = ParseReplicaKind(f, "replica");
  t.pad_multiple = f.integer("pad_multiple", 0, 0, kMaxScenarioSize);
  if (t.pad_multiple > 0 && t.shape.empty()) {
    Fail(ErrorKind::kInvalidArgument, "{}: must be positive and the tensor at least 1-d",
         f.at("pad_multiple"));
  }
  t.glu = f.boolean("glu", false);
  if (t.glu && (t.shape.empty() || t.shape[0] % 2 != 0 || t.flatten || t.pad_multiple > 0 ||
                t.split != SplitKind::kEven)) {
    Fail(ErrorKind::kInvalidArgument,
         "{}: a GLU tensor needs an even axis 0 ([W; V]), an even split, no flatten and no "
         "pad_multiple (shape {})",
         f.at("glu"), ShapeToString(t.shape));
  }
  if (f.has("stack")) {
    Fields sf(f.get("stack"), f.at("stack"), {"shape", "over"});
    int64_t entries = 1;
    for (const json& d : sf.array("shape")) {
      t.stack.push_back(InRange(d, 1, kMaxScenarioCount, sf.at("shape") + " sizes"));
      entries *= t.stack.back();
      if (entries > kMaxScenarioCount) {
        Fail(ErrorKind::kInvalidArgument, "{}: more than {} stacked entries", sf.at("shape"),
             kMaxScenarioCount);
      }
    }
    if (t.stack.empty()) Fail(ErrorKind::kInvalidArgument, "{}: at least one axis", sf.at("shape"));
    if (sf.has("over")) {
      t.stack_over = AtPath(sf.at("over"), [&] { return ParseMeshDim(sf.str("over")); });
      if (*t.stack_over != MeshDim::kPp) {
        Fail(ErrorKind::kInvalidArgument, "{}: only \"pp\" distributes a stack", sf.at("over"));
      }
      for (const auto& [axis, dims] : t.shard) {
        if (std::count(dims.begin(), dims.end(), MeshDim::kPp)) {
          Fail(ErrorKind::kInvalidArgument, "{}: pp already shards axis {}", sf.at("over"), axis);
        }
      }
      if (t.flatten == MeshDim::kPp) {
        Fail(ErrorKind::kInvalidArgument, "{}: pp already flattens the tensor", sf.at("over"));
      }
    }
  }
  Shape stacked = t.stack;
  stacked.insert(stacked.end(), t.shape.begin(), t.shape.end());
  AtPath(f.at("shape"), [&] { return Volume(stacked); });  // the element count fits int64
  return t;
}

Scenario Scenario::FromJson(const json& j, const std::string& source) {
  return AtPath(source, [&] {
    Fields f(j, "$",
             {"name", "seed", "model", "tensors", "objects", "topologies", "pairs", "strict",
              "optimizer", "fsdp", "fp8", "description"});
    Scenario s;
    s.name = f.str("name", "unnamed");
    s.seed = static_cast<uint64_t>(f.integer("seed", 1));
    if (f.has("model")) {
      const json& m = f.get("model");
      if (m.is_array()) {
        for (size_t i = 0; i < m.size(); ++i) {
          s.models.push_back(ParseGptConfig(m[i], f.at("model") + "[" + std::to_string(i) + "]"));
        }
      } else {
        s.models.push_back(ParseGptConfig(m, f.at("model")));
      }
    }
    if (f.has("optimizer"))
      s.optimizer = ParseOptimizerConfig(f.get("optimizer"), f.at("optimizer"), {}, true);
    if (f.has("fsdp")) s.fsdp = ParseFsdpSection(f.get("fsdp"), f.at("fsdp"));
    if (f.has("fp8")) s.fp8 = ParseFp8Section(f.get("fp8"), f.at("fp8"));
    if (f.has("tensors")) s.tensors = ParseTensors(f.get("tensors"), f.at("tensors"));
    if (f.has("objects")) {
      const json& objs = f.array("objects");
      for (size_t i = 0; i < objs.size(); ++i) {
        std::string p = f.at("objects") + "[" + std::to_string(i) + "]";
        Fields of(objs[i], p, {"key", "per"});
        ObjectSpec o{of.str("key"), {}};
        if (of.has("per")) o.per = ParseDims(of.get("per"), of.at("per"));
        s.objects.push_back(std::move(o));
      }
    }
    if (f.has("topologies")) {
      const json& topos = f.array("topologies");
      for (size_t i = 0; i < topos.size(); ++i) {
        std::string p = f.at("topologies") + "[" + std::to_string(i) + "]";
        if (!topos[i].is_string()) Fail(ErrorKind::kInvalidArgument, "{}: expected a string", p);
        AtPath(p, [&] { return Topology::Parse(topos[i].get<std::string>()); });
        s.topologies.push_back(topos[i].get<std::string>());
      }
    }
    if (f.has("pairs")) {
      const json& pairs = f.array("pairs");
      for (size_t i = 0; i < pairs.size(); ++i) {
        s.pairs.push_back(ParsePair(pairs[i], f.at("pairs") + "[" + std::to_string(i) + "]"));
      }
    }
    if (f.has("strict")) s.strict = ParseStrictAt(f, "strict");
    if (s.optimizer && (s.models.empty() || !s.tensors.empty())) {
      // Optimizer state is expanded for the model generators' parameters
      // only (rank_state.cc): refuse rather than save a silently empty one.
      Fail(ErrorKind::kInvalidArgument,
           "{}: the optimizer section applies to the parameters of \"model\" generators only; "
           "{}",
           f.at("optimizer"),
           s.models.empty() ? "this scenario has no model, so its optimizer state would be empty"
                            : "its \"tensors\" would get no optimizer state (move them to a "
                              "scenario without an optimizer)");
    }
    CheckFp8Keys(s);
    CheckFsdpCombinations(s);
    return s;
  });
}

json ReadScenarioJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail(ErrorKind::kInvalidArgument, "cannot open scenario file {}", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  CheckJsonDepth(buffer.str(), path);
  json j = json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (j.is_discarded()) Fail(ErrorKind::kInvalidArgument, "{}: not valid JSON", path);
  return j;
}

Scenario Scenario::FromFile(const std::string& path) {
  return FromJson(ReadScenarioJson(path), path);
}

}  // namespace distckpt
