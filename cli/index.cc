// distckpt index: an external item index (a "sidecar",
// reference/format/dcp/sidecar_index.h) for each .distcp data file of a DCP
// checkpoint that has none of its own (torch wrote it), so that a resharded
// load verifies a partial read by the tiles it touches instead of reading
// every torch record it needs part of whole. Every tensor item is read whole
// and verified as a full verified load does; a bad record (exit 2, naming the
// file and key) leaves that file without a sidecar. Sidecars go to the cache
// directory ($DISTCKPT_INDEX_DIR, else $XDG_CACHE_HOME/distckpt/index, else
// ~/.cache/distckpt/index) with a size record each, --into DIR likewise, or
// with --beside next to each data file; the checkpoint's own files are never
// modified. Each is written to a
// temporary file and renamed.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/metadata_api.h"
#include "format/dcp/dcp_reader.h"     // internal: index reads the DCP records itself
#include "format/dcp/sidecar_index.h"  // internal: the sidecar files index writes
#include "io/env.h"

namespace distckpt {
namespace {

struct IndexArgs {
  std::string dir, into;
  bool beside = false;
};

int IndexCommand(const IndexArgs& args) {
  Env* env = Env::Default();
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<CheckpointReader> opened = OpenCheckpoint(args.dir, env);
  auto* reader = dynamic_cast<DcpReader*>(opened.get());
  if (!reader) {
    Fail(ErrorKind::kInvalidArgument,
         "{} is a {} checkpoint; `distckpt index` indexes DCP checkpoints (.distcp files)",
         args.dir, opened->metadata().format);
  }
  std::string into = args.into;
  if (!args.beside && into.empty()) {
    into = DcpIndexCacheDir();
    if (into.empty()) {
      Fail(ErrorKind::kInvalidArgument,
           "no cache directory: set DISTCKPT_INDEX_DIR, XDG_CACHE_HOME or HOME, or give --into "
           "DIR or --beside");
    }
  }
  if (!into.empty()) env->CreateDirs(into);
  std::set<std::string> files;
  for (const auto& [key, tensor] : reader->metadata().tensors) {
    for (const StoredChunk& chunk : tensor.chunks) files.insert(chunk.file);
  }
  uint64_t written = 0, skipped = 0, sidecar_bytes = 0;
  for (const std::string& file : files) {
    const std::string path = JoinPath(args.dir, file);
    if (!env->FileExists(path)) continue;  // a load reports it
    const uint64_t size = env->FileSize(path);
    if (size >= kDcpIndexTrailerBytes) {
      std::unique_ptr<RandomAccessFile> f = env->NewRandomAccessFile(path);
      std::vector<std::byte> last(kDcpIndexTrailerBytes);
      f->Read(size - last.size(), last);
      if (ParseDcpIndexTrailer(last, size, path)) {
        std::cout << fmt::format("{}: has an item index of its own (distckpt wrote it): skipped\n",
                                 path);
        ++skipped;
        continue;
      }
    }
    uint64_t items = 0;
    const std::string index = reader->BuildItemIndex(file, &items);
    if (index.empty()) {
      std::cout << fmt::format("{}: no tensor item an index can list: skipped\n", path);
      ++skipped;
      continue;
    }
    std::string out;
    if (args.beside) {
      out = DcpSidecarBeside(path);
      WriteFileAtomic(env, out, index);
    } else {
      out = WriteDcpSidecarCached(env, into, path, size, index);
    }
    std::cout << fmt::format("{}: {} items verified and indexed in {} ({} bytes)\n", path, items,
                             out, index.size());
    ++written;
    sidecar_bytes += index.size();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << fmt::format(
      "indexed {}: {} data files indexed ({} sidecar bytes), {} skipped; {} bytes read, {:.3f} "
      "s\n",
      args.dir, written, sidecar_bytes, skipped, reader->stats().bytes_read.load(), seconds);
  return kExitOk;
}

}  // namespace

Command AddIndexCommand(CLI::App& app) {
  auto args = std::make_shared<IndexArgs>();
  CLI::App* index = app.add_subcommand(
      "index",
      "verify a DCP checkpoint torch wrote and write an item index for each data file (partial "
      "reads then verify only the tiles they touch)");
  index->add_option("dir", args->dir, "DCP checkpoint directory (or a training run's root)")
      ->required();
  auto* into = index->add_option("--into", args->into,
                                 "directory for the indexes (default: $DISTCKPT_INDEX_DIR, else "
                                 "$XDG_CACHE_HOME/distckpt/index, else ~/.cache/distckpt/index)");
  index
      ->add_flag("--beside", args->beside,
                 "write <file>.dcpindex next to each data file (adds files to the checkpoint)")
      ->excludes(into);
  return {index, [args](CommandLine&) {
            ResolveRunRoot(args->dir);
            return IndexCommand(*args);
          }};
}

}  // namespace distckpt
