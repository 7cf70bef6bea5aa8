// Per-block checksums of native format versions 2 and 3 (native/FORMAT.md,
// "Verification"): a chunk's payload is cut into blocks of `block_size` bytes
// (the last one shorter) and each block has its own xxHash3-64, seeded with a
// binding of the chunk's identity (tensor key, dtype, global offset and
// shape, flat range) and the block's index. So a reader verifies exactly the
// blocks a partial read touches, and a checksum moved to another key,
// position, dtype or block does not verify. Version 2 keeps them in
// metadata.json (hex); version 3 stores them in the data file right after the
// payload (8 bytes little-endian each, the "sums") and metadata.json keeps
// one checksum of the sums per chunk. Objects carry one checksum bound to
// their unique key.
//
// Shared by the formats: native's chunks and objects, and DCP's item index
// (dcp/item_index.h: block sizes, binding seeds, the sums' checksum) and
// block reads (block_reads.h).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_BLOCK_CHECKSUMS_H_
#define DISTCKPT_FORMAT_BLOCK_CHECKSUMS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/block_layout.h"
#include "format/checkpoint_metadata.h"

namespace distckpt {

// The block size a version 3 writer uses for a chunk of `length` bytes: a
// power of two between kMinBlockBytes and kMaxBlockBytes aiming at about
// kTargetBlocks blocks per chunk (small chunks get small blocks, so a partial
// read of them reads little more than it needs). 16 blocks, not 64 as
// before 2026-11-27: a seeded xxHash3 call costs about 15 ns beside its
// bytes, so 1 KiB blocks hash at about 24 GB/s and 4 KiB ones at 34 here,
// and verifying a load of 64 KiB chunks took 1.3 ms of CPU per 16 MiB in
// 1 KiB blocks against 0.8 in 4 KiB ones (bench/README.md, sixth round). At most a page: a partial
// read whose runs start and end on page boundaries (a resharded row-major
// tensor's column blocks) reads exactly its bytes, and the kernel reads whole
// pages anyway. Version 2, which kept the checksums in metadata.json, capped
// blocks at 64 KiB to keep it small; in the data file they cost 8 bytes per
// 4 KiB (0.2%), and hashing 4 KiB blocks runs at 35.5 GB/s against 40.4 for
// 64 KiB ones here (bench/README.md, "Verified loads").
inline constexpr uint64_t kMinBlockBytes = 16;
inline constexpr uint64_t kMaxBlockBytes = 4 << 10;
inline constexpr uint64_t kTargetBlocks = 16;
uint64_t ChooseBlockSize(uint64_t length);
// ceil(length / block_size).
uint64_t BlockCount(uint64_t length, uint64_t block_size);

// The seed binding a chunk's block checksums to its identity.
uint64_t ChunkBindingSeed(const std::string& key, DType dtype, const StoredChunk& chunk);
uint64_t ObjectBindingSeed(const std::string& unique_key);
// The checksum of block `index` (bytes `data`) of a chunk bound by `seed`:
// Checksum(data, BlockSeed(seed, index)).
uint64_t BlockChecksum(std::span<const std::byte> data, uint64_t seed, uint64_t index);
uint64_t BlockSeed(uint64_t seed, uint64_t index);

// Version 3: the checksum of a chunk's sums (`sums`, as stored), bound like
// a block with index sums.size(), one past the last block.
uint64_t SumsChecksum(std::span<const uint64_t> sums, uint64_t seed);
// Versions 3 and 4: the bytes of a chunk's sums that follow its payload in
// the data file (8 per block or tile); 0 for chunks of other versions.
uint64_t SumsBytes(const StoredChunk& chunk);

// Version 4: the tiles of `chunk` of `tensor` (its block_size set).
BlockLayout TileLayout(const StoredTensor& tensor, const StoredChunk& chunk);
// Whether TileLayout gives chunks `a` of `ta` and `b` of `tb` the same
// layout because it is given the same inputs (global shape, box, flat range
// and kind, element size, length, block size): chunks of one save often are
// (a model's layers hold tensors of equal shapes), and a writer computes the
// layout of a run of them once.
bool SameTileInputs(const StoredTensor& ta, const StoredChunk& a, const StoredTensor& tb,
                    const StoredChunk& b);
// TileLayout(tensor, chunk).tiles(), remembering the inputs of the last
// call: a run of chunks with the same inputs (a parse of the metadata of a
// model's equal-shaped tensors) computes the layout once. One per thread.
class TileCounter {
 public:
  uint64_t Tiles(const StoredTensor& tensor, const StoredChunk& chunk);

 private:
  StoredTensor tensor_;  // the last inputs (no key, no chunks)
  StoredChunk chunk_;    // (no file)
  uint64_t tiles_ = 0;
  bool valid_ = false;
};
// The blocks of a version 2, 3 or 4 chunk (version 4: its recorded tile
// count must be what its shape cuts, else kCorruption).
BlockLayout ChunkLayout(const StoredTensor& tensor, const StoredChunk& chunk);

// Version 2: block checksums as stored in metadata.json: 16 lower-case hex digits each,
// concatenated. Parsing throws kCorruption for a malformed string.
std::string BlockChecksumsToHex(const std::vector<uint64_t>& checksums);
std::vector<uint64_t> BlockChecksumsFromHex(const std::string& hex);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_BLOCK_CHECKSUMS_H_
