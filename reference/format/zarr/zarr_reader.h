// ZarrReader: reads a checkpoint of Megatron-Core's legacy `zarr` sharded
// backend (Megatron-Core <= 0.15; FORMAT.md beside this file).
//
// Open (the constructor) walks the directory: a directory holding `.zarray`
// is the tensor whose key is its path below the checkpoint (keys holding '/'
// are nested directories, as Megatron's save made them); one holding
// `shard_*.pt` files is the ShardedObject of that key, one StoredObject per
// file; `*.sync` directories (zarr's process locks) and other files are
// skipped. Each .zarray is checked (zarr_array.h) and each chunk of its grid
// becomes a StoredChunk (box: its cell clipped to the shape; file
// "<key>/<i.j.k>"; no checksum): every chunk file must exist and hold exactly
// one whole cell, checked by size before anything is read. common.pt is the
// common state. The metadata has no topology (zarr records none).
//
// ReadChunk reads exactly the requested runs; in a chunk at the array's edge
// they are mapped past the cell's padding. Zarr stores no checksum: every
// chunk read counts in ReadStats::chunks_unverified, whatever the policy.
// Objects and common.pt are torch.save archives read through the safe
// unpickler (torch_save.h): their zip CRC32s are checked. Their records
// (ReadObjectRecord, CommonRecord) are those pickles wrapped in a list, as
// DCP stores objects, so a reshard or export to dcp keeps them as stored.
//
// Errors: CheckpointError naming the file (and key): kCorruption for a
// missing or wrongly sized chunk file, a symbolic link anywhere in the
// checkpoint (distckpt reads only regular files and real directories), a
// damaged .zarray, object or common.pt; kUnsupported for Zarr features
// Megatron never wrote.
//
// Thread-safety: ReadChunk, ReadObject and stats() may be called concurrently.
#ifndef DISTCKPT_FORMAT_ZARR_ZARR_READER_H_
#define DISTCKPT_FORMAT_ZARR_ZARR_READER_H_

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/format.h"
#include "format/zarr/zarr_array.h"

namespace distckpt {

class ZarrReader : public CheckpointReader {
 public:
  // `dir` must hold a Megatron metadata.json naming the zarr backend
  // (ZarrFormat checks it before).
  ZarrReader(Env* env, std::string dir);

  const CheckpointMetadata& metadata() const override { return metadata_; }
  void ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                 std::span<const ReadRun> runs, VerifyPolicy policy) override;
  // The chunk's file holds a whole chunk (zarr pads edge chunks to the full
  // cell), opened no-follow; kCorruption naming the file otherwise.
  void CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) override;
  std::string ReadObject(const StoredObject& object) override;
  // The object as a DCP object item holds it: torch.save([value]), the
  // stored pickle kept op for op inside the list (so a save to dcp keeps
  // tuples, numpy arrays and classes a JSON round trip would lose). A pickle
  // that cannot be rewritten so (protocol 4+) gives nullptr (its value is
  // then saved from ReadObject's JSON).
  std::shared_ptr<const ObjectRecord> ReadObjectRecord(const StoredObject& object) override;
  // common.pt the same way (torch.save([common state])); null if not wrappable.
  std::shared_ptr<const ObjectRecord> CommonRecord() const override { return common_record_; }
  const ReadStats& stats() const override { return stats_; }

 private:
  // Adds the tensor or object stored in directory `rel` (below dir_), or
  // walks into it; `depth` levels below the checkpoint.
  void Walk(const std::string& rel, int depth);
  void AddTensor(const std::string& key);
  void AddObjects(const std::string& key, const std::vector<std::string>& shard_files);
  // The object file's value and, with `record`, its wrapped record.
  void ReadObjectFile(const StoredObject& object, nlohmann::json& value,
                      std::shared_ptr<const ObjectRecord>* record);

  Env* const env_;
  const std::string dir_;
  CheckpointMetadata metadata_;
  std::shared_ptr<const ObjectRecord> common_record_;  // set by the constructor
  std::map<std::string, ZarrArray> arrays_;            // by key; set by the constructor
  ReadStats stats_;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_ZARR_ZARR_READER_H_
