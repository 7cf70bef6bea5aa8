// The save protocol driven by hand for one process (interop/offline_writer.h).
#include "interop/offline_writer.h"

#include "io/file_lock.h"

namespace distckpt {

uint64_t WriteWithRankWriters(
    Env* env, const std::string& out, const Format& format, const CheckpointMetadata& like,
    int ranks, const std::function<void(std::vector<std::unique_ptr<CheckpointWriter>>&)>& fill) {
  // The same exclusion as an engine save (io/file_lock.h): a concurrent save
  // into `out` fails naming this one.
  std::unique_ptr<FileLock> lock = FileLock::LockForSave(env, out);
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

}  // namespace distckpt
