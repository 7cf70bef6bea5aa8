// External item indexes ("sidecars", FORMAT.md "Item index sidecars"): the
// item index of a .distcp data file that has none of its own (torch wrote it),
// which `distckpt index` writes after reading and verifying every tensor item
// whole. A sidecar holds the same bytes DcpIndexWriter::Finish(items_end)
// appends to a file distckpt writes, with items_end the data file's size: its
// offsets count from the data file's start as if the index followed the
// file's last byte (a reader reads index byte `at` at sidecar byte `at -
// items_end`). It lies beside the data file (`<file>.dcpindex`, written only
// when asked: it adds a file to a checkpoint distckpt did not write) or in a
// cache directory, named by the xxHash3 of the data file's canonical path and
// size, so two checkpoints do not collide. Beside a cache sidecar, a size
// record named by the path alone (`.dcpsize`) holds the size it was written
// for: a reader that finds no sidecar under the file's current size but a
// record of another size warns that the file changed since `distckpt index`.
//
// Binding: the trailer's items_end must be the data file's size, and each
// entry's storage record must still be where the entry says with the CRC32
// and size it says (DcpRecordBound: the record's zip data descriptor or local
// header, a few tens of bytes); a reader that finds either untrue, or a
// sidecar that fails its own checks, does not use it (it reads the records
// whole to verify them, as without a sidecar) and warns once naming it.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_SIDECAR_INDEX_H_
#define DISTCKPT_FORMAT_DCP_SIDECAR_INDEX_H_

#include <cstdint>
#include <optional>
#include <string>

#include "format/dcp/item_index.h"
#include "io/env.h"

namespace distckpt {

inline constexpr char kDcpSidecarSuffix[] = ".dcpindex";
inline constexpr char kDcpSidecarSizeSuffix[] = ".dcpsize";

// The cache directory of sidecars: $DISTCKPT_INDEX_DIR, else
// $XDG_CACHE_HOME/distckpt/index, else $HOME/.cache/distckpt/index; empty
// when none of them is set.
std::string DcpIndexCacheDir();
// `<data_path>.dcpindex`.
std::string DcpSidecarBeside(const std::string& data_path);
// The sidecar of the local data file `data_path` of `size` bytes in
// `cache_dir`: `<xxh3 of its canonical path and size, 16 hex digits>.dcpindex`.
std::string DcpSidecarCached(const std::string& cache_dir, const std::string& data_path,
                             uint64_t size);
// The size record of the local data file `data_path` in `cache_dir`:
// `<xxh3 of its canonical path, 16 hex digits>.dcpsize`, holding
// "<size> <canonical path>\n", the size the file had when its sidecar was
// last written there.
std::string DcpSidecarSizeRecord(const std::string& cache_dir, const std::string& data_path);
// Writes `index` as the cache sidecar of `data_path` of `size` bytes
// (DcpSidecarCached), then its size record, each to a temporary file renamed
// into place. Returns the sidecar's path.
std::string WriteDcpSidecarCached(Env* env, const std::string& cache_dir,
                                  const std::string& data_path, uint64_t size,
                                  const std::string& index);
// The size the size record of `data_path` in `cache_dir` names; nullopt
// when there is none or it is not one (a cache older than size records).
std::optional<uint64_t> ReadDcpSidecarSize(Env* env, const std::string& cache_dir,
                                           const std::string& data_path);
// Whether `entry`'s storage record still lies in `file` as the entry says,
// the record of the item [item_offset, item_end): the zip data descriptor
// right after it (torch's items; 16 or 24 bytes) or, where there is none, its
// local header (up to 256 bytes before it) records the entry's CRC32 and
// size. Counts what it reads into `*bytes_read`. False on any disagreement
// or read error.
bool DcpRecordBound(const RandomAccessFile& file, const DcpIndexEntry& entry, uint64_t item_offset,
                    uint64_t item_end, std::atomic<uint64_t>* bytes_read);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_SIDECAR_INDEX_H_
