#include "format/dcp/dcp_layout.h"

#include <fmt/ranges.h>

#include <cctype>
#include <optional>

#include "core/error.h"
#include "mapping/sharded_object.h"

namespace distckpt {
namespace {

using StorageKey = std::pair<std::string, std::optional<Shape>>;

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

// The chunk shape of a reformulated tensor in original coordinates:
// orig[d] / fragments[d], whose volume is the reformulated last dimension.
Shape ReformulatedLocalShape(const std::string& fqn, const Shape& orig, const Shape& reformulated,
                             const std::string& source) {
  bool ok = reformulated.size() == orig.size() + 1;
  Shape local(orig.size());
  for (size_t d = 0; ok && d < orig.size(); ++d) {
    ok = reformulated[d] > 0 && orig[d] % reformulated[d] == 0;
    if (ok) local[d] = orig[d] / reformulated[d];
  }
  if (!ok || Volume(local) != reformulated.back()) {
    Fail(ErrorKind::kCorruption,
         "{}: mcore_data['{}'] gives original shape {}, which does not reformulate to the stored "
         "shape {}",
         source, fqn, ShapeToString(orig), ShapeToString(reformulated));
  }
  return local;
}

// A reformulated chunk (chunk index..., flat start) of size (1, ..., 1, n)
// as a box in original coordinates plus a flat range.
void UnflattenChunk(const DcpChunk& c, const Shape& local, const std::string& what,
                    StoredChunk& chunk) {
  const size_t r = local.size();
  chunk.box.offset.resize(r);
  chunk.box.shape = local;
  for (size_t d = 0; d < r; ++d) {
    if (c.sizes[d] != 1) {
      Fail(ErrorKind::kCorruption,
           "{}: N-D flattened chunk at {} has size {}, expected 1 on every "
           "axis but the last",
           what, ShapeToString(c.offsets), ShapeToString(c.sizes));
    }
    chunk.box.offset[d] = c.offsets[d] * local[d];
  }
  chunk.flat = FlatRange{c.offsets[r], c.offsets[r] + c.sizes[r]};
}

}  // namespace

int DcpFileRank(std::string_view file) {
  size_t at = file.rfind("__");
  if (at == std::string_view::npos) return 0;
  int rank = 0;
  bool digits = false;
  for (size_t i = at + 2; i < file.size() && std::isdigit(static_cast<unsigned char>(file[i]));
       ++i) {
    if (rank > 100'000'000) return 0;
    rank = rank * 10 + (file[i] - '0');
    digits = true;
  }
  return digits ? rank : 0;
}

DcpLayout LayoutFromDcp(const DcpMetadata& dcp, const std::string& source) {
  DcpLayout layout;
  layout.target = dcp.target;
  CheckpointMetadata& md = layout.metadata;
  md.format = "dcp";
  auto info = [&](const std::string& k) {
    auto it = dcp.distckpt_info.find(k);
    return it == dcp.distckpt_info.end() ? std::string() : it->second;
  };
  md.writer = info("writer");
  if (md.writer.empty()) {
    md.writer = dcp.target == DcpTarget::kTorch113 ? "PyTorch DCP (torch 1.13 class paths)"
                                                   : "PyTorch DCP (torch 2.x class paths)";
  }
  md.topology = info("topology");

  std::map<StorageKey, const DcpStorage*> storage;
  std::map<DcpItemKey, const DcpStorage*> by_item;
  for (const DcpStorage& s : dcp.storage) {
    if (!IsPlainFileName(s.relative_path)) {
      Fail(ErrorKind::kCorruption,
           "{}: storage_data['{}'] names '{}', which is not a plain file "
           "name inside the checkpoint directory",
           source, s.fqn, s.relative_path);
    }
    storage[{s.fqn, s.offset}] = &s;
    by_item[{s.relative_path, s.offset_in_file}] = &s;
    layout.items[{s.relative_path, s.offset_in_file}] = {s.length, s.transforms};
  }
  // Every entry is its own item: two entries at one place, or items that
  // overlap, mean a damaged offset or length (DCP has no checksum of its
  // own for bytes items, so a load would read another entry's bytes).
  if (by_item.size() != dcp.storage.size()) {
    std::map<DcpItemKey, const DcpStorage*> first;
    for (const DcpStorage& s : dcp.storage) {
      auto [it, added] = first.try_emplace({s.relative_path, s.offset_in_file}, &s);
      if (!added) {
        Fail(ErrorKind::kCorruption,
             "{}: storage_data entries '{}' and '{}' both start at byte {} of {}", source,
             it->second->fqn, s.fqn, s.offset_in_file, s.relative_path);
      }
    }
  }
  for (auto it = by_item.begin(); it != by_item.end(); ++it) {
    auto next = std::next(it);
    const DcpStorage& s = *it->second;
    if (next != by_item.end() && next->first.first == s.relative_path &&
        s.length > next->first.second - s.offset_in_file) {  // sorted: next starts after s
      Fail(ErrorKind::kCorruption,
           "{}: storage_data entry '{}' (bytes [{}, {}) of {}) overlaps '{}' at byte {}", source,
           s.fqn, s.offset_in_file, s.offset_in_file + s.length, s.relative_path, next->second->fqn,
           next->first.second);
    }
  }
  auto find = [&](const std::string& fqn, const std::optional<Shape>& offset) -> const DcpStorage& {
    auto it = storage.find({fqn, offset});
    if (it == storage.end()) {
      Fail(ErrorKind::kCorruption, "{}: storage_data has no entry for '{}'{}", source, fqn,
           offset ? " chunk at " + ShapeToString(*offset) : std::string());
    }
    return *it->second;
  };
  std::map<std::string, std::vector<std::string>> paths;
  if (dcp.planner_data) paths.insert(dcp.planner_data->begin(), dcp.planner_data->end());

  for (const DcpEntry& e : dcp.entries) {
    if (e.is_bytes) {
      const DcpStorage& s = find(e.fqn, std::nullopt);
      std::optional<ShardedObject> object;
      try {
        object = ShardedObject::EmptyFromUniqueKey(e.fqn);
      } catch (const CheckpointError&) {  // not a unique key: plain common state
        auto path = paths.find(e.fqn);
        layout.values.push_back({path != paths.end() && !path->second.empty()
                                     ? path->second
                                     : std::vector<std::string>{e.fqn},
                                 s.relative_path, s.offset_in_file, s.length});
        continue;
      }
      StoredObject o{object->key,
                     e.fqn,
                     object->global_shape,
                     object->global_offset,
                     s.relative_path,
                     s.offset_in_file,
                     s.length,
                     std::nullopt,
                     DcpFileRank(s.relative_path)};
      md.objects.emplace(e.fqn, std::move(o));
      continue;
    }
    const std::string what = fmt::format("{}: '{}'", source, e.fqn);
    StoredTensor t{e.fqn, e.dtype, e.size, {}};
    auto mcore = dcp.mcore_orig_shapes.find(e.fqn);
    Shape local;
    if (mcore != dcp.mcore_orig_shapes.end()) {
      t.global_shape = mcore->second;
      local = ReformulatedLocalShape(e.fqn, mcore->second, e.size, source);
    }
    for (const DcpChunk& c : e.chunks) {
      const DcpStorage& s = find(e.fqn, c.offsets);
      StoredChunk chunk;
      if (mcore != dcp.mcore_orig_shapes.end()) {
        UnflattenChunk(c, local, what, chunk);
      } else {
        chunk.box = Box{c.offsets, c.sizes};
      }
      chunk.file = s.relative_path;
      chunk.offset = s.offset_in_file;
      chunk.length = static_cast<uint64_t>(chunk.numel()) * DTypeSize(e.dtype);
      chunk.writer_rank = DcpFileRank(s.relative_path);
      t.chunks.push_back(std::move(chunk));
    }
    md.tensors.emplace(e.fqn, std::move(t));
  }
  return layout;
}

DcpMetadata DcpFromMetadata(
    const CheckpointMetadata& md, DcpTarget target,
    const std::function<uint64_t(const std::string&, uint64_t)>& item_length,
    const std::vector<DcpValueItem>& values) {
  DcpMetadata dcp;
  dcp.target = target;
  dcp.planner_data.emplace();
  for (const auto& [key, t] : md.tensors) {
    DcpEntry e{key, false, t.dtype, t.global_shape, {}};
    // A tensor of no elements has no N-D flattened layout (a local extent is
    // 0): its empty chunks are stored as plain boxes.
    bool flattened = false;
    for (const StoredChunk& c : t.chunks) flattened |= c.flat.has_value();
    flattened &= Volume(t.global_shape) > 0;
    // Megatron's N-D flattened layout: fragments per axis + (volume of a chunk,).
    Shape local = flattened ? t.chunks.front().box.shape : Shape();
    if (flattened) {
      bool grid = true;
      for (const StoredChunk& c : t.chunks) {
        grid &= c.box.shape == local;
        for (size_t d = 0; grid && d < local.size(); ++d) {
          grid =
              local[d] > 0 && t.global_shape[d] % local[d] == 0 && c.box.offset[d] % local[d] == 0;
        }
      }
      if (!grid) {
        Fail(ErrorKind::kUnsupported,
             "tensor '{}': flattened chunks that do not lie on a regular "
             "grid cannot be stored in DCP (Megatron's N-D flattened layout needs one)",
             key);
      }
      e.size.clear();
      for (size_t d = 0; d < local.size(); ++d) e.size.push_back(t.global_shape[d] / local[d]);
      e.size.push_back(Volume(local));
      dcp.mcore_orig_shapes[key] = t.global_shape;
    }
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const StoredChunk& c = t.chunks[i];
      DcpChunk chunk{c.box.offset, c.box.shape};
      if (flattened) {
        FlatRange f = c.flat.value_or(FlatRange{0, Volume(local)});
        for (size_t d = 0; d < local.size(); ++d) {
          chunk.offsets[d] /= local[d];
          chunk.sizes[d] = 1;
        }
        chunk.offsets.push_back(f.start);
        chunk.sizes.push_back(f.size());
      }
      dcp.storage.push_back({key,
                             chunk.offsets,
                             static_cast<int64_t>(i),
                             c.file,
                             c.offset,
                             item_length(c.file, c.offset),
                             {}});
      e.chunks.push_back(std::move(chunk));
    }
    dcp.entries.push_back(std::move(e));
    dcp.planner_data->emplace_back(key, std::vector<std::string>{key});
  }
  for (const auto& [unique_key, o] : md.objects) {
    dcp.entries.push_back({unique_key, true, DType::kF32, {}, {}});
    dcp.storage.push_back({unique_key, std::nullopt, std::nullopt, o.file, o.offset, o.length, {}});
    dcp.planner_data->emplace_back(unique_key, std::vector<std::string>{unique_key});
  }
  for (const DcpValueItem& v : values) {
    const std::string fqn = fmt::format("{}", fmt::join(v.path, "."));
    dcp.entries.push_back({fqn, true, DType::kF32, {}, {}});
    dcp.storage.push_back({fqn, std::nullopt, std::nullopt, v.file, v.offset, v.length, {}});
    dcp.planner_data->emplace_back(fqn, v.path);
  }
  if (!md.writer.empty()) dcp.distckpt_info["writer"] = md.writer;
  if (!md.topology.empty()) dcp.distckpt_info["topology"] = md.topology;
  return dcp;
}

}  // namespace distckpt
