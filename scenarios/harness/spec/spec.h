// Scenario files (schema version 1, documented in scenarios/README.md):
// parsed and checked here, with errors naming the JSON path of the bad field.
// Unknown fields are an error.
//
// Thread-safety: value types.
#ifndef DISTCKPT_SCENARIO_SPEC_H_
#define DISTCKPT_SCENARIO_SPEC_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "format/format.h"
#include "fsdp/layout.h"
#include "harness/spec/fp8_spec.h"
#include "harness/spec/gpt_config.h"
#include "mapping/strict.h"
#include "optim/optimizer_state.h"
#include "topology/topology.h"

namespace distckpt {

enum class SplitKind { kEven, kChunk };

// Which holder of each chunk is its main replica (replica id all zeros):
// kMegatron: (PP, TP, DP) components, each the rank's coordinate along the
// mesh dims that do not split the tensor (the first holder is main);
// kReversed: the same with every coordinate mirrored (the last holder);
// kFlat: one integer, the (PP, TP, DP) components in mixed radix (Megatron's
// int replica ids).
enum class ReplicaKind { kMegatron, kReversed, kFlat };
std::string_view ReplicaKindName(ReplicaKind kind);

struct TensorSpec {
  std::string key;
  Shape shape;  // logical (unpadded) global shape
  DType dtype = DType::kF32;
  // axis -> mesh dims splitting it, outermost first ({"0": ["tp", "dp"]}).
  std::map<int, std::vector<MeshDim>> shard;
  SplitKind split = SplitKind::kEven;
  std::optional<MeshDim> flatten;   // distributed-optimizer style flat ranges over this dim
  bool flatten_jitter = false;      // Megatron test_flattened_resharding's uneven ranges
  int64_t pad_multiple = 0;         // pad axis 0 to a multiple of pad_multiple * parts(axis 0)
  std::optional<DType> load_dtype;  // request dtype on load, when it differs
  ReplicaKind replica = ReplicaKind::kMegatron;
  // Megatron's prepended axes (prepend_axis_num; e.g. the layer axis of
  // stacked decoder layers): leading global axes of these sizes, absent from
  // every local chunk. A rank holds one ShardedTensor per index it owns, at
  // dict path "<key>.<i>[.<j>...]"; `shape`, `shard` and the rest describe
  // the other axes. Empty: no prepended axes.
  Shape stack;
  // kPp: axis 0 of the stack in contiguous blocks over the pp x vpp virtual
  // pipeline stages (stage v*pp + pp_rank holds block stage, as Megatron
  // numbers layers), so PP and VPP changes move indices between ranks;
  // nullopt: every rank holds every index.
  std::optional<MeshDim> stack_over;
  // Megatron's SwiGLU linear_fc1 (apply_swiglu_sharded_factory): axis 0 is
  // [W; V], each half split over axis 0's mesh dims, so a rank holds
  // [W_p; V_p] saved as two pieces of one factory (W_p at offset p*n, V_p at
  // shape[0]/2 + p*n, each of 2*parts fragments) and TP can change.
  bool glu = false;
};

// A tensor of the "fp8" section: `tensor.dtype` is the nominal dtype.
struct Fp8TensorSpec {
  TensorSpec tensor;
  Fp8Options fp8;
};

struct ObjectSpec {
  std::string key;
  std::vector<MeshDim> per;  // one object per coordinate of these dims
};

// Deliberate damage to a save, to test that validation refuses it.
// kind "gap": drop the rank's shard; "overlap": also save rank+1's shard as
// a main replica; "shift": move the rank's shard by `by` elements along
// `axis` (metadata only); "dtype": save the rank's shard as `dtype`.
struct BreakSpec {
  std::string key;
  std::string kind;
  int rank = 0;
  int axis = 0;               // shift
  int64_t by = 1;             // shift
  DType dtype = DType::kF32;  // dtype
};

// Damage to one file of the committed checkpoint, between the save and the
// load (the corruption property's mutations, replayable): byte `at` of
// `file` set to `value`, or the file truncated to `truncate` bytes. `file`
// is a name inside the checkpoint directory (no path separators).
struct DamageSpec {
  std::string file;
  int64_t at = 0;
  uint8_t value = 0;
  std::optional<int64_t> truncate;
};

struct PairSpec {
  std::string save;
  std::string load;
  std::optional<StrictHandling> strict;
  std::optional<std::string> expect_error;  // nullopt = expect ok
  // "expect": "loaded_or_refused": the load either gives every element its
  // value or fails with a checkpoint error (not wrong values, not another
  // exception) — the verdict for a damaged checkpoint.
  bool expect_loaded_or_refused = false;
  std::optional<DamageSpec> damage;
  VerifyPolicy verify = VerifyPolicy::kWhenWhole;  // the load's checksum policy
  // "resave": after the load, save the loaded state again under the load's
  // topology; the pair fails unless that checkpoint is `distckpt diff`-
  // identical to the first, and, with `resave_load`, unless it loads right
  // under that topology too.
  bool resave = false;
  std::optional<std::string> resave_load;
  std::vector<TensorSpec> load_extra;  // requested on load only (unexpected keys)
  std::vector<std::string> load_drop;  // not requested on load (missing keys)
  // Keys not requested on some ranks only (`{"key", "ranks"}` items of
  // load_drop): Megatron's missing keys are those no rank requests.
  std::map<std::string, std::vector<int>> load_drop_ranks;
  std::optional<BreakSpec> break_save;
  std::optional<std::string> expect_missing;  // for return_*: comma-separated sorted keys
  std::optional<std::string> expect_unexpected;
  nlohmann::json load_model;            // overrides of every model's fields on load (null = none)
  nlohmann::json load_optimizer;        // pad_divisor / bucket_numel on load (null = as saved)
  std::optional<FsdpLayout> load_fsdp;  // the FSDP layout on load (nullopt = as saved)

  // True if rank `rank`'s load request leaves `key` out (load_drop, load_drop_ranks).
  bool Drops(const std::string& key, int rank) const;
};

struct Scenario {
  std::string name;
  uint64_t seed = 1;
  std::vector<TensorSpec> tensors;
  std::vector<ObjectSpec> objects;
  std::vector<std::string> topologies;
  std::vector<PairSpec> pairs;
  StrictHandling strict = StrictHandling::kAssumeOkUnexpected;
  std::vector<GptConfig> models;             // "model": one generator or a list of them
  std::optional<OptimizerConfig> optimizer;  // Adam state for the model generators' parameters
  // A request spec inferred from a checkpoint whose optimizer state it does
  // not request (Megatron 0.20's dp_reshardable buckets): verify and reshard
  // still refuse the (TP, PP) change Megatron refuses.
  bool check_stored_optimizer = false;
  FsdpLayout fsdp = FsdpLayout::kNone;  // FSDP layout of the eligible tensor specs
  std::vector<Fp8TensorSpec> fp8;       // the "fp8" section (harness/spec/fp8_parse.h)

  // Throws CheckpointError(kInvalidArgument) naming `source` and the field.
  static Scenario FromJson(const nlohmann::json& json, const std::string& source);
  static Scenario FromFile(const std::string& path);
  // The scenario file (spec_json.cc): FromJson(ToJson()) gives this scenario
  // back. `description` (optional) goes into the file's "description".
  nlohmann::json ToJson(const std::string& description = "") const;
};

// The JSON of a scenario / spec file (comments allowed); errors name `path`.
nlohmann::json ReadScenarioJson(const std::string& path);

TensorSpec ParseTensorSpec(const nlohmann::json& json, const std::string& path);
nlohmann::json TensorSpecToJson(const TensorSpec& spec);
// An "optimizer" section (`full`) or a pair's load_optimizer overrides of
// `base` (pad_divisor, bucket_numel only).
OptimizerConfig ParseOptimizerConfig(const nlohmann::json& json, const std::string& path,
                                     OptimizerConfig base, bool full);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_SPEC_H_
