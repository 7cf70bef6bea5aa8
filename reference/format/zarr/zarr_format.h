// The zarr format: checkpoints of Megatron-Core's legacy `zarr` sharded
// backend (Megatron-Core <= 0.15; removed in 0.16, so the current Megatron
// cannot open them). Read only: distckpt reads them (ZarrReader) so that
// `inspect`, `verify`, `dump`, `diff`, loads and reshards work, and
// `export --to dcp` rewrites them in the torch_dist layout Megatron reads
// today. Writing is refused (kUnsupported).
//
// Detect: metadata.json is Megatron's CheckpointingConfig with
// "sharded_backend": "zarr" (Megatron writes it last: its presence is the
// commit). OpenReader also requires sharded_backend_version 1.
//
// Thread-safety: stateless.
#ifndef DISTCKPT_FORMAT_ZARR_ZARR_FORMAT_H_
#define DISTCKPT_FORMAT_ZARR_ZARR_FORMAT_H_

#include "format/format.h"

namespace distckpt {

const Format& ZarrFormat();

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_ZARR_ZARR_FORMAT_H_
