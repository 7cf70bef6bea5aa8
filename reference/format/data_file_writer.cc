#include "format/data_file_writer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "format/hashed_writes.h"

namespace distckpt {
namespace {

bool ConsumeDigits(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  s.remove_prefix(n);
  return n > 0;
}

bool ConsumePrefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string RankFileName(int rank, int index, std::string_view suffix) {
  return fmt::format("__{}_{}{}", rank, index, suffix);
}

bool IsRankFileName(std::string_view name, std::string_view suffix) {
  return ConsumePrefix(name, "__") && ConsumeDigits(name) && ConsumePrefix(name, "_") &&
         ConsumeDigits(name) && name == suffix;
}

DataFileWriter::DataFileWriter(Env* env, std::string dir, int rank, std::string file_name,
                               CheckpointMetadata metadata)
    : env_(env),
      dir_(std::move(dir)),
      rank_(rank),
      file_name_(std::move(file_name)),
      metadata_(std::move(metadata)) {
  metadata_.writer = "distckpt " DISTCKPT_VERSION;
}

void DataFileWriter::CheckOpen() const {
  if (finished_) {
    Fail(ErrorKind::kInvalidArgument, "{} writer of rank {} already finished", metadata_.format,
         rank_);
  }
}

WritableFile& DataFileWriter::File() {
  if (!file_) file_ = env_->NewWritableFile(JoinPath(dir_, file_name_));
  return *file_;
}

uint64_t DataFileWriter::Size() { return File().size() + pending_.size() + held_bytes_; }

template <typename Fn>
void DataFileWriter::ForEachQueued(Fn&& fn) const {
  size_t begin = 0;  // of pending_ bytes not yet given
  auto pending_to = [&](size_t end) {
    if (end > begin) fn(std::as_bytes(std::span(pending_).subspan(begin, end - begin)), begin);
    begin = end;
  };
  for (const Held& h : held_) {
    pending_to(h.pending_before);
    fn(h.bytes, std::string::npos);
  }
  pending_to(pending_.size());
}

void DataFileWriter::Flush(std::span<const std::byte> also) {
  if (held_.empty()) {  // the common case: at most two parts
    if (pending_.empty()) {
      if (!also.empty()) file_->Append(also);
    } else {
      const std::span<const std::byte> parts[] = {std::as_bytes(std::span(pending_)), also};
      file_->AppendGathered(parts);
    }
  } else {
    std::vector<std::span<const std::byte>> parts;
    parts.reserve(2 * held_.size() + 2);
    ForEachQueued([&](std::span<const std::byte> part, size_t) { parts.push_back(part); });
    parts.push_back(also);
    file_->AppendGathered(parts);
  }
  pending_.clear();
  held_.clear();
  held_bytes_ = 0;
}

uint64_t DataFileWriter::Append(std::span<const std::byte> bytes) {
  const uint64_t offset = Size();
  if (bytes.size() < kJoinedAppendBytes) {
    if (pending_.size() + bytes.size() > kPendingBytes) Flush();
    pending_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  } else {
    Flush(bytes);
  }
  bytes_written_ += bytes.size();
  return offset;
}

uint64_t DataFileWriter::AppendHeld(std::span<const std::byte> bytes) {
  if (bytes.size() < kJoinedAppendBytes) return Append(bytes);
  const uint64_t offset = Size();
  held_.push_back({pending_.size(), bytes});
  held_bytes_ += bytes.size();
  bytes_written_ += bytes.size();
  if (held_bytes_ + pending_.size() >= kMaxHashedRunBytes) Flush();
  return offset;
}

void DataFileWriter::Overwrite(uint64_t offset, std::span<const std::byte> bytes) {
  // Bytes in the file are written over; bytes still queued are patched,
  // unless they are held (checked first: nothing is patched then).
  const uint64_t in_file = file_->size();
  auto for_each_queued_overlap = [&](auto&& fn) {
    uint64_t at = in_file;
    ForEachQueued([&](std::span<const std::byte> part, size_t pending_begin) {
      const uint64_t begin = std::max(at, offset),
                     end = std::min(at + part.size(), offset + bytes.size());
      if (begin < end)
        fn(begin, end,
           pending_begin == std::string::npos ? pending_begin : pending_begin + (begin - at));
      at += part.size();
    });
  };
  for_each_queued_overlap([&](uint64_t begin, uint64_t, size_t pending_at) {
    if (pending_at == std::string::npos) {
      Fail(ErrorKind::kInvalidArgument, "{}: bytes at offset {} are held, not overwritable",
           file_name_, begin);
    }
  });
  if (offset < in_file) {
    RequireCapability(env_, EnvCapability::kWriteAt,
                      fmt::format("overwrite bytes of {} already written", file_name_));
    const size_t head = static_cast<size_t>(std::min<uint64_t>(bytes.size(), in_file - offset));
    file_->WriteAt(offset, bytes.first(head));
  }
  for_each_queued_overlap([&](uint64_t begin, uint64_t end, size_t pending_at) {
    std::memcpy(pending_.data() + pending_at, bytes.data() + (begin - offset), end - begin);
  });
}

void DataFileWriter::AppendChecksums(std::span<const std::byte> bytes, bool held) {
  held ? AppendHeld(bytes) : Append(bytes);
  bytes_written_ -= bytes.size();
}

DataFileWriter::PendingChunk DataFileWriter::Prepare(const std::string& key, DType dtype,
                                                     const Shape& global_shape, const Box& box,
                                                     const std::optional<FlatRange>& flat,
                                                     std::span<const std::byte> bytes) {
  CheckOpen();
  if (!InsideShape(box, global_shape)) {
    Fail(ErrorKind::kInvalidArgument, "chunk {} of tensor '{}' lies outside its global shape {}",
         box.ToString(), key, ShapeToString(global_shape));
  }
  if (flat && (flat->start < 0 || flat->start > flat->stop || flat->stop > box.volume())) {
    Fail(ErrorKind::kInvalidArgument,
         "flat range [{}, {}) of tensor '{}' chunk {} exceeds its {} elements", flat->start,
         flat->stop, key, box.ToString(), box.volume());
  }
  StoredChunk chunk;
  chunk.box = box;
  chunk.flat = flat;
  chunk.length = static_cast<uint64_t>(chunk.numel()) * DTypeSize(dtype);
  if (bytes.size() != chunk.length) {
    Fail(ErrorKind::kInvalidArgument,
         "tensor '{}' chunk {}: got {} bytes, but {} elements of {} take {}", key, box.ToString(),
         bytes.size(), chunk.numel(), DTypeName(dtype), chunk.length);
  }
  auto [it, inserted] =
      metadata_.tensors.try_emplace(key, StoredTensor{key, dtype, global_shape, {}});
  StoredTensor& tensor = it->second;
  if (!inserted && (tensor.dtype != dtype || tensor.global_shape != global_shape)) {
    Fail(ErrorKind::kShapeMismatch,
         "tensor '{}' written as dtype {} global shape {}, then as dtype {} global shape {}", key,
         DTypeName(tensor.dtype), ShapeToString(tensor.global_shape), DTypeName(dtype),
         ShapeToString(global_shape));
  }
  chunk.file = file_name_;
  chunk.writer_rank = rank_;
  return {&tensor, std::move(chunk), bytes};
}

StoredChunk DataFileWriter::WriteTensorChunk(const std::string& key, DType dtype,
                                             const Shape& global_shape, const Box& box,
                                             const std::optional<FlatRange>& flat,
                                             std::span<const std::byte> bytes) {
  PendingChunk pending = Prepare(key, dtype, global_shape, box, flat, bytes);
  StoreChunk(*pending.tensor, pending.chunk, bytes);
  pending.tensor->chunks.push_back(pending.chunk);
  return pending.chunk;
}

void DataFileWriter::WriteTensorChunks(std::span<const ChunkToWrite> chunks) {
  std::vector<PendingChunk> pending;
  pending.reserve(chunks.size());
  for (const ChunkToWrite& c : chunks)
    pending.push_back(Prepare(*c.key, c.dtype, *c.global_shape, c.box, c.flat, c.bytes));
  StoreChunks(pending);
  for (PendingChunk& p : pending) p.tensor->chunks.push_back(std::move(p.chunk));
}

void DataFileWriter::StoreInRuns(std::span<PendingChunk> chunks,
                                 const std::function<void(std::span<PendingChunk>)>& store_run) {
  size_t i = 0;
  while (i < chunks.size()) {
    size_t end = i;  // [i, end): small chunks
    while (end < chunks.size() && chunks[end].bytes.size() < kHashOffloadMinBytes) ++end;
    if (helpers() > 0 && end - i >= 2) {
      store_run(chunks.subspan(i, end - i));
    } else {
      for (size_t k = i; k < end; ++k)
        StoreChunk(*chunks[k].tensor, chunks[k].chunk, chunks[k].bytes);
    }
    if (end < chunks.size()) StoreChunk(*chunks[end].tensor, chunks[end].chunk, chunks[end].bytes);
    i = end + 1;
  }
}

StoredObject DataFileWriter::WriteObject(const std::string& key, const std::string& unique_key,
                                         const Shape& global_shape, const Shape& global_offset,
                                         std::span<const std::byte> bytes) {
  CheckOpen();
  if (metadata_.objects.contains(unique_key)) {
    Fail(ErrorKind::kInvalidArgument, "object '{}' written twice by rank {}", unique_key, rank_);
  }
  StoredObject object;
  object.key = key;
  object.unique_key = unique_key;
  object.global_shape = global_shape;
  object.global_offset = global_offset;
  object.file = file_name_;
  object.writer_rank = rank_;
  StoreObject(object, bytes);
  metadata_.objects.emplace(unique_key, object);
  return object;
}

CheckpointMetadata DataFileWriter::Finish() {
  CheckOpen();
  finished_ = true;
  if (file_) {
    FinishItems(Size());
    Flush();
    file_->Sync();
    file_->Close();
  }
  return std::move(metadata_);
}

}  // namespace distckpt
