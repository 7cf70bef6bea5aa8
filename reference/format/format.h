// Format: how a checkpoint is laid out on disk. The engine plans and
// exchanges; a Format writes and reads bytes. Native (format/native/) and
// PyTorch DCP sit side by side behind this interface.
//
// Save protocol (driven by the engine):
//   1. coordinator: dir = PrepareDirectory(dir, overwrite)   (then broadcast)
//   2. every rank:  w = NewWriter(dir, rank); w->WriteTensorChunk(...)...;
//                   local = w->Finish()   (data durable: fsync'd)
//   3. coordinator: Commit(dir, merged metadata of every rank)   (last; atomic)
// A directory is a checkpoint iff Commit completed.
//
// Load: r = OpenReader(dir) (throws kIncomplete for an uncommitted or missing
// directory; refuses stored chunks that do not tile their tensor exactly,
// CheckChunkTiling); r->metadata(); r->ReadChunk(...) reads exactly the requested
// byte runs (formats whose items are not raw row-major bytes read the whole
// item and say so in ReadStats).
//
// Thread-safety: a Format is stateless. A writer belongs to one rank; a
// reader may serve concurrent ReadChunk calls.
#ifndef DISTCKPT_FORMAT_FORMAT_H_
#define DISTCKPT_FORMAT_FORMAT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "format/checkpoint_metadata.h"
#include "io/env.h"
#include "mapping/sharded_object.h"

namespace distckpt {

class Communicator;  // comm/communicator.h

// One chunk of CheckpointWriter::WriteTensorChunks: WriteTensorChunk's
// arguments (the key and global shape by pointer, alive for the call).
struct ChunkToWrite {
  const std::string* key = nullptr;
  DType dtype{};
  const Shape* global_shape = nullptr;
  Box box;
  std::optional<FlatRange> flat;
  std::span<const std::byte> bytes;
};

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  // Appends one chunk's raw little-endian bytes (`box` in the coordinates of
  // `global_shape`; with `flat`, only those elements of its row-major order);
  // returns where it went. Sizes that disagree are CheckpointError(kInvalidArgument).
  virtual StoredChunk WriteTensorChunk(const std::string& key, DType dtype,
                                       const Shape& global_shape, const Box& box,
                                       const std::optional<FlatRange>& flat,
                                       std::span<const std::byte> bytes) = 0;
  // WriteTensorChunk of each chunk in order, with the same result; every
  // chunk's bytes stay valid for the whole call, so a format may work on
  // later chunks while it writes earlier ones (native: helpers hash small
  // chunks ahead of the writes, which gather several chunks per system call).
  virtual void WriteTensorChunks(std::span<const ChunkToWrite> chunks) {
    for (const ChunkToWrite& c : chunks)
      WriteTensorChunk(*c.key, c.dtype, *c.global_shape, c.box, c.flat, c.bytes);
  }
  // `bytes`: the object's value as JSON text, or a record of it in the
  // format's Format::ObjectRecordEncoding (ObjectRecord::bytes), stored as-is.
  virtual StoredObject WriteObject(const std::string& key, const std::string& unique_key,
                                   const Shape& global_shape, const Shape& global_offset,
                                   std::span<const std::byte> bytes) = 0;
  // Flushes and fsyncs this rank's files; returns this rank's metadata.
  virtual CheckpointMetadata Finish() = 0;
  // Payload bytes written so far (chunks and objects; not a format's own
  // checksums that it stores beside them).
  virtual uint64_t bytes_written() const = 0;
  // Threads of the process's helper pool (core/helper_pool.h) the writer
  // may borrow for its own CPU work (native: hashing a large chunk while
  // writing it); 0, the default, does everything on the calling thread. A
  // rank that shares the machine's cores with other ranks passes at most its
  // share less one (comm/communicator.h, ThreadsPerRank - 1). Formats
  // without such work ignore it.
  virtual void SetHelpers(int helpers) {}
};

// One read of part of a stored chunk into caller memory.
struct ReadRun {
  uint64_t offset_in_chunk = 0;
  uint64_t length = 0;
  std::byte* dst = nullptr;
};

enum class VerifyPolicy {
  kWhenWhole,  // verify a chunk's checksum when the runs read cover all of it
  kAlways,     // read every touched chunk whole to verify it (more bytes read)
  kNever,
};
// "whole", "always", "never" (the CLI's --verify, a scenario pair's "verify").
std::string_view VerifyPolicyName(VerifyPolicy policy);
// Throws CheckpointError(kInvalidArgument) for another name.
VerifyPolicy ParseVerifyPolicy(std::string_view name);

struct ReadStats {
  std::atomic<uint64_t> bytes_read{0};  // payload bytes
  // Native version 3: the block checksums read from the data files (8 bytes
  // a block of every chunk a verified read touches), not in bytes_read.
  std::atomic<uint64_t> checksum_bytes_read{0};
  std::atomic<uint64_t> chunks_verified{0};
  std::atomic<uint64_t> chunks_unverified{0};  // partially read, not verifiable
};

// One chunk read of a batch (CheckpointReader::ReadChunks).
struct ChunkRead {
  const StoredTensor* tensor = nullptr;
  const StoredChunk* chunk = nullptr;
  std::span<const ReadRun> runs;
};

// StreamChunk's consumer: chunk bytes [offset_in_chunk, + bytes.size()).
using ConsumeBytes =
    std::function<void(uint64_t offset_in_chunk, std::span<const std::byte> bytes)>;

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  virtual const CheckpointMetadata& metadata() const = 0;
  // Reads `runs` (sorted by offset, non-overlapping) of chunk `chunk` of
  // `tensor`. Verifies the checksum per `policy`; a mismatch throws
  // CheckpointError(kCorruption) naming file, key and chunk offset.
  virtual void ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                         std::span<const ReadRun> runs, VerifyPolicy policy) = 0;
  // ReadChunk of each of `reads` in turn: the same bytes, checks, errors and
  // stats. A format may read chunks that lie back to back in one file with
  // fewer system calls (native: small verified chunks read whole, one preadv
  // for several). This default calls ReadChunk for each.
  virtual void ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy);
  // Reads the byte ranges `ranges` of chunk `chunk` (ReadRuns whose dst is
  // unused; sorted, non-overlapping) and hands them to `consume(offset in
  // the chunk, bytes)` in order, in pieces of about `piece_bytes`, each
  // checked per `policy` before it is handed out; `bytes` lives in the
  // reader's buffer until `consume` returns. So a caller that converts the
  // bytes holds one piece, not the chunk. This default reads every range at
  // once (ReadChunk into one buffer): formats that verify whole chunks only.
  virtual void StreamChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                           std::span<const ReadRun> ranges, VerifyPolicy policy,
                           uint64_t piece_bytes, const ConsumeBytes& consume);
  // The object's value as JSON text, verified.
  virtual std::string ReadObject(const StoredObject& object) = 0;
  // The object as stored, verified, with its value (ReadObject's, parsed);
  // nullptr for a format that stores objects as their JSON text. A save to a
  // format of the same ObjectRecordEncoding writes it back byte for byte.
  virtual std::shared_ptr<const ObjectRecord> ReadObjectRecord(const StoredObject& object) {
    return nullptr;
  }
  // The same for the common state, when the checkpoint stores it as the
  // object kCommonStateKey; its value is that object's, before any common
  // value stored apart was added (so it no longer equals metadata().common
  // if one was). nullptr otherwise.
  virtual std::shared_ptr<const ObjectRecord> CommonRecord() const { return nullptr; }
  virtual const ReadStats& stats() const = 0;
  // Fails (CheckpointError(kCorruption) naming the file and the key) unless
  // `chunk`'s data file holds its byte range (native: its block checksums
  // too). Metadata can claim any size: whoever allocates memory sized from
  // it calls this (or CheckTensorStored) first.
  virtual void CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) = 0;
  // Collective over `comm`: a load's ranks call it after planning and before
  // reading, each with `chunks` giving the chunks it is about to read (any,
  // none included; called only by formats that use it). A format whose
  // readers all read the same bytes before the chunks' own (DCP: a data
  // file's item index) has one rank read each piece and send it to the
  // others, which check it as they would a piece they read (ranks in
  // separate processes read it once between them, not once each). Every
  // rank's reader reads the same checkpoint in the same format, so every
  // rank issues the same collectives (none: this default). A failure here
  // reads nothing: the reads report it.
  using ChunksFn = std::function<std::vector<const StoredChunk*>()>;
  virtual void PrepareReads(const ChunksFn& chunks, Communicator& comm) {}
};

// CheckStored of every chunk of `tensor`, and that they hold at least the
// bytes of its global shape (chunks that cover it do): after this, a buffer
// of the tensor's size is bounded by what its data files hold.
void CheckTensorStored(CheckpointReader& reader, const StoredTensor& tensor);

// The sharded object holding the common state when a format keeps it in a
// data file (Format::CommonStateAsObject): unique key "common_state/shard_0_1".
inline constexpr char kCommonStateKey[] = "common_state";

class Format {
 public:
  virtual ~Format() = default;
  virtual std::string_view name() const = 0;
  // True if `dir` looks like a committed checkpoint of this format.
  virtual bool Detect(Env* env, const std::string& dir) const = 0;
  // Coordinator only. Creates `dir` if needed, removes stale files of an
  // uncommitted attempt; a committed checkpoint in `dir` is refused
  // (kInvalidArgument) unless `overwrite`, in which case the save goes to a
  // staging directory that Commit swaps in, so the old checkpoint survives a
  // failed save. Returns the directory ranks write into.
  virtual std::string PrepareDirectory(Env* env, const std::string& dir, bool overwrite) const = 0;
  // Coordinator only, after a save into `write_dir` (PrepareDirectory's) failed
  // on every rank before its commit: removes the files it left (its data
  // files, temps; a staging directory whole), so a failed save does not keep
  // a full disk full. Nothing is removed once `write_dir` is committed.
  virtual void RemoveUncommitted(Env* env, const std::string& dir,
                                 const std::string& write_dir) const = 0;
  virtual std::unique_ptr<CheckpointWriter> NewWriter(Env* env, const std::string& write_dir,
                                                      int rank) const = 0;
  // A writer of data stream `stream` (>= 0) of `rank`: distinct streams write
  // distinct files, so several threads may write one rank's data at once
  // (async save's writers). Stream 0 is NewWriter; formats that write one
  // file per rank refuse the others (kUnsupported).
  virtual std::unique_ptr<CheckpointWriter> NewStreamWriter(Env* env, const std::string& write_dir,
                                                            int rank, int stream) const {
    if (stream != 0) {
      Fail(ErrorKind::kUnsupported, "the {} format writes one data file per rank: use one writer",
           name());
    }
    return NewWriter(env, write_dir, rank);
  }
  // Whether a save hands the common state to the writers as the sharded
  // object "common_state" (Megatron-Core 0.20's torch_dist layout: inside
  // rank 0's data file, no common.pt) rather than to Commit alone. A Commit
  // of metadata without that object stores the common state its own way.
  virtual bool CommonStateAsObject() const { return false; }
  // The encoding of the ObjectRecords this format's readers give and its
  // writers store as-is ("torch.save" for DCP); empty when objects are stored
  // as their JSON text.
  virtual std::string_view ObjectRecordEncoding() const { return {}; }
  // Coordinator only, after every rank's Finish: writes the metadata last,
  // atomically (and swaps a staging directory into `dir`). Takes the merged
  // metadata by value: a caller done with it moves it in (no copy).
  virtual void Commit(Env* env, const std::string& dir, const std::string& write_dir,
                      CheckpointMetadata metadata) const = 0;
  virtual std::unique_ptr<CheckpointReader> OpenReader(Env* env, const std::string& dir) const = 0;
};

const Format& NativeFormat();
// Every format this build knows, in detection order (formats.cc lists them).
const std::vector<const Format*>& AllFormats();
// The format called `name` ("native", ...); kInvalidArgument listing the known ones.
const Format& FormatByName(std::string_view name);
// Finds the format of a committed checkpoint; kIncomplete when none matches.
const Format& DetectFormat(Env* env, const std::string& dir);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_FORMAT_H_
