#include "engine/metadata_api.h"

#include "engine/common_state.h"
#include "engine/read_state.h"
#include "format/format.h"

namespace distckpt {
namespace {

Dict TensorsMetadata(const CheckpointMetadata& md) {
  Dict out;
  for (const auto& [key, stored] : md.tensors) out[key] = Node(WholeTensorRequest(key, stored));
  return out;
}

}  // namespace

ShardedTensor WholeTensorRequest(const std::string& key, const StoredTensor& stored) {
  ShardedTensor t;
  t.key = key;
  t.dtype = stored.dtype;
  t.local_shape = stored.global_shape;
  t.global_shape = stored.global_shape;
  t.global_offset = Shape(stored.global_shape.size(), 0);
  t.axis_fragmentations = Shape(stored.global_shape.size(), 1);
  return t;
}

Node LoadTensorsMetadata(const std::string& dir, Env* env) {
  return Node(TensorsMetadata(OpenCheckpoint(dir, env)->metadata()));
}

Node LoadShardedMetadata(const std::string& dir, Env* env) {
  auto reader = OpenCheckpoint(dir, env);
  Dict out = TensorsMetadata(reader->metadata());
  for (const auto& [unique_key, stored] : reader->metadata().objects) {
    ShardedObject o;
    o.key = stored.key;
    o.global_shape = stored.global_shape;
    o.global_offset = stored.global_offset;
    out[unique_key] = Node(std::move(o));
  }
  return Node(std::move(out));
}

std::unique_ptr<CheckpointReader> OpenCheckpoint(const std::string& dir, Env* env) {
  if (!env) env = Env::Default();
  return DetectFormat(env, dir).OpenReader(env, dir);
}

Node LoadCommonStateDict(const std::string& dir, Env* env) {
  return LoadCommonStateDict(*OpenCheckpoint(dir, env));
}

Node LoadCommonStateDict(const CheckpointReader& reader) {
  return CommonFromJson(reader.metadata().common);
}

Node LoadPlainTensors(const std::string& dir, Env* env, LoadSummary* summary) {
  auto reader = OpenCheckpoint(dir, env);
  Node request(TensorsMetadata(reader->metadata()));
  return ReadShardedState(*reader, request, VerifyPolicy::kWhenWhole, summary);
}

}  // namespace distckpt
