// distckpt export --to native|dcp|dcp-1.13: a checkpoint rewritten in
// another format by one writer, tensor by tensor (cli/hf.h).
#include <fmt/format.h>

#include <iostream>

#include "cli/hf.h"
#include "core/error.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"
#include "io/file_lock.h"

namespace distckpt {

uint64_t WriteWithRankWriters(
    Env* env, const std::string& out, const Format& format, const CheckpointMetadata& like,
    int ranks, const std::function<void(std::vector<std::unique_ptr<CheckpointWriter>>&)>& fill) {
  // The same exclusion as an engine save (io/file_lock.h): a concurrent save
  // into `out` fails naming this one.
  std::unique_ptr<FileLock> lock = FileLock::LockForSave(Env::Default(), out);
  const std::string write_dir = format.PrepareDirectory(env, out, /*overwrite=*/false);
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int rank = 0; rank < ranks; ++rank)
    writers.push_back(format.NewWriter(env, write_dir, rank));
  fill(writers);
  CheckpointMetadata merged;
  merged.format = std::string(format.name());
  uint64_t bytes = 0;
  for (auto& writer : writers) {
    merged.MergeFrom(writer->Finish());
    bytes += writer->bytes_written();
  }
  merged.topology = like.topology;
  merged.common = like.common;
  merged.content = like.content;
  format.Commit(env, out, write_dir, merged);
  return bytes;
}

uint64_t WriteWithOneWriter(Env* env, const std::string& out, const Format& format,
                            const CheckpointMetadata& like,
                            const std::function<void(CheckpointWriter&)>& fill) {
  return WriteWithRankWriters(
      env, out, format, like, 1,
      [&](std::vector<std::unique_ptr<CheckpointWriter>>& writers) { fill(*writers[0]); });
}

ConvertSummary ConvertCheckpoint(const std::string& src, const std::string& out,
                                 const Format& format) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, src).OpenReader(env, src);
  const CheckpointMetadata& md = reader->metadata();
  Node whole = LoadTensorsMetadata(src, env);
  ConvertSummary summary;
  summary.bytes_written = WriteWithOneWriter(env, out, format, md, [&](CheckpointWriter& writer) {
    for (const auto& [key, node] : whole.as<Dict>()) {
      // One global tensor in memory at a time, in its stored dtype.
      ShardedTensor request = node.as<ShardedTensor>();
      CheckTensorStored(*reader, md.tensors.at(key));  // before a buffer of its claimed size
      request.data = Tensor::Empty(request.dtype, request.global_shape);
      Node loaded = ReadShardedState(*reader, Node(Dict{{"t", Node(request)}}),
                                     VerifyPolicy::kWhenWhole, nullptr, 1);
      const Tensor& t = loaded.at("t").as<Tensor>();
      writer.WriteTensorChunk(key, request.dtype, request.global_shape,
                              Box{Shape(request.global_shape.size(), 0), request.global_shape},
                              std::nullopt, t.bytes());
      ++summary.tensors;
      summary.largest_tensor_bytes = std::max<uint64_t>(summary.largest_tensor_bytes, t.nbytes());
    }
    // Objects (and the common state, where the format keeps it as an object)
    // as stored when the formats share an encoding (a zarr or DCP pickle to
    // DCP: tuples, numpy arrays and classes kept), else as their JSON value.
    const std::string_view encoding = format.ObjectRecordEncoding();
    auto write_object = [&](const std::string& key, const std::string& unique_key,
                            const Shape& shape, const Shape& offset,
                            const std::shared_ptr<const ObjectRecord>& record,
                            const std::function<std::string()>& json) {
      const std::string bytes =
          record && !encoding.empty() && record->encoding == encoding ? record->bytes : json();
      writer.WriteObject(key, unique_key, shape, offset,
                         std::as_bytes(std::span(bytes.data(), bytes.size())));
    };
    for (const auto& [unique_key, object] : md.objects) {
      write_object(object.key, unique_key, object.global_shape, object.global_offset,
                   encoding.empty() ? nullptr : reader->ReadObjectRecord(object),
                   [&] { return reader->ReadObject(object); });
      ++summary.objects;
    }
    const std::shared_ptr<const ObjectRecord> common = reader->CommonRecord();
    if (format.CommonStateAsObject() && common && common->value == md.common) {
      write_object(kCommonStateKey, std::string(kCommonStateKey) + "/shard_0_1", {1}, {0}, common,
                   [&] { return md.common.dump(); });
    }
  });
  return summary;
}

}  // namespace distckpt
