#include "format/dcp/dcp_metadata.h"

#include "core/error.h"
#include "format/dcp/pickler.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/unpickler.h"

namespace distckpt {
namespace {

// Module paths of the DCP classes per target (docs/dcp-format.md §2 table).
struct ClassPaths {
  std::string_view metadata;           // Metadata, *StorageMetadata, MetadataIndex
  std::string_view filesystem;         // _StorageInfo
  std::string_view tensor_properties;  // TensorProperties and its enum
  std::string_view mem_format_enum;
};

constexpr ClassPaths kTorch2Paths = {
    "torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
    "torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"};
constexpr ClassPaths kTorch113Paths = {"torch.distributed._shard.checkpoint.metadata",
                                       "torch.distributed._shard.checkpoint.filesystem",
                                       "torch.distributed._shard.sharded_tensor.metadata",
                                       "MEM_FORMAT_ENCODING"};

const ClassPaths& PathsFor(DcpTarget target) {
  return target == DcpTarget::kTorch113 ? kTorch113Paths : kTorch2Paths;
}

bool IsDcpClass(const PyValue& v, std::string_view name) {
  return v.IsInstance(kTorch2Paths.metadata, name) || v.IsInstance(kTorch113Paths.metadata, name);
}

class Decoder {
 public:
  explicit Decoder(const std::string& source) : source_(source) {}

  DcpMetadata Decode(const PyValue& root) {
    DcpMetadata md;
    if (IsDcpClass(root, "Metadata")) {
      md.target = root.callable->text == kTorch113Paths.metadata ? DcpTarget::kTorch113
                                                                 : DcpTarget::kTorch2;
    } else if (!root.IsInstance("megatron.core.dist_checkpointing.strategies.torch",
                                "MCoreMetadata")) {
      Fail(ErrorKind::kCorruption, "{}: the pickle holds a {} {}, not a DCP Metadata", source_,
           PyKindName(root.kind), root.GlobalName());
    }
    const PyValue& sdm =
        Dict(PyRequireField(root, "state_dict_metadata", source_), "state_dict_metadata");
    for (const auto& [key, value] : sdm.entries) {
      md.entries.push_back(Entry(PyToStr(*key, source_ + ": state_dict_metadata key"), *value));
    }
    if (const PyValue* pd = root.Field("planner_data"); pd && pd->kind == PyKind::kDict) {
      md.planner_data.emplace();
      for (const auto& [key, path] : pd->entries) {
        if (key->kind != PyKind::kStr ||
            (path->kind != PyKind::kTuple && path->kind != PyKind::kList))
          continue;
        std::vector<std::string> parts;
        for (const PyValue* p : path->items) {
          parts.push_back(p->kind == PyKind::kInt ? std::to_string(p->integer)
                                                  : PyToStr(*p, source_ + ": planner_data"));
        }
        md.planner_data->emplace_back(key->text, std::move(parts));
      }
    }
    const PyValue& sd = Dict(PyRequireField(root, "storage_data", source_),
                             "storage_data (not written by FileSystemWriter?)");
    for (const auto& [index, info] : sd.entries) md.storage.push_back(Storage(*index, *info));
    if (const PyValue* mcore = root.Field("mcore_data"); mcore && mcore->kind == PyKind::kDict) {
      for (const auto& [key, value] : mcore->entries) {
        if (const PyValue* shape = value->Get("nd_reformulated_orig_global_shape")) {
          const std::string& k = PyToStr(*key, source_ + ": mcore_data key");
          md.mcore_orig_shapes[k] = PyToShape(*shape, source_ + ": mcore_data['" + k + "']");
        }
      }
    }
    if (const PyValue* info = root.Field("distckpt"); info && info->kind == PyKind::kDict) {
      for (const auto& [key, value] : info->entries) {
        if (key->kind == PyKind::kStr && value->kind == PyKind::kStr)
          md.distckpt_info[key->text] = value->text;
      }
    }
    if (const PyValue* version = root.Field("version"); version && version->kind == PyKind::kStr) {
      md.version = version->text;
    }
    return md;
  }

 private:
  const PyValue& Dict(const PyValue& v, std::string_view what) {
    if (v.kind != PyKind::kDict) {
      Fail(ErrorKind::kCorruption, "{}: {} is a {}, not a dict", source_, what, PyKindName(v.kind));
    }
    return v;
  }

  DcpEntry Entry(const std::string& fqn, const PyValue& v) {
    const std::string what = fmt::format("{}: state_dict_metadata['{}']", source_, fqn);
    DcpEntry e;
    e.fqn = fqn;
    if (IsDcpClass(v, "BytesStorageMetadata")) {
      e.is_bytes = true;
      return e;
    }
    if (!IsDcpClass(v, "TensorStorageMetadata")) {
      Fail(ErrorKind::kCorruption, "{}: a {} {}, not Tensor/BytesStorageMetadata", what,
           PyKindName(v.kind), v.GlobalName());
    }
    const PyValue& props = PyRequireField(v, "properties", what);
    const PyValue* dtype =
        props.state && props.state->kind == PyKind::kTuple && !props.state->items.empty()
            ? props.state->items[0]
            : props.Field("dtype");
    if (!dtype || dtype->kind != PyKind::kGlobal || dtype->text != "torch") {
      Fail(ErrorKind::kCorruption, "{}: TensorProperties without a torch dtype", what);
    }
    std::optional<DType> parsed = ParseDType(dtype->name);
    if (!parsed) {
      Fail(ErrorKind::kUnsupported, "{}: dtype torch.{} is not one distckpt holds", what,
           dtype->name);
    }
    e.dtype = *parsed;
    e.size = PyToShape(PyRequireField(v, "size", what), what + ".size");
    for (const PyValue* c : PyToSequence(PyRequireField(v, "chunks", what), what + ".chunks")) {
      DcpChunk chunk{PyToShape(PyRequireField(*c, "offsets", what), what + " chunk offsets"),
                     PyToShape(PyRequireField(*c, "sizes", what), what + " chunk sizes")};
      bool inside = chunk.offsets.size() == e.size.size() && chunk.sizes.size() == e.size.size();
      for (size_t d = 0; inside && d < e.size.size(); ++d) {
        inside = chunk.offsets[d] <= e.size[d] && chunk.sizes[d] <= e.size[d] - chunk.offsets[d];
      }
      if (!inside) {
        Fail(ErrorKind::kCorruption, "{}: chunk at {} of size {} lies outside the tensor's size {}",
             what, ShapeToString(chunk.offsets), ShapeToString(chunk.sizes), ShapeToString(e.size));
      }
      e.chunks.push_back(std::move(chunk));
    }
    return e;
  }

  DcpStorage Storage(const PyValue& index, const PyValue& info) {
    const std::string what = source_ + ": storage_data";
    if (!IsDcpClass(index, "MetadataIndex")) {
      Fail(ErrorKind::kCorruption, "{}: key is a {} {}, not a MetadataIndex", what,
           PyKindName(index.kind), index.GlobalName());
    }
    DcpStorage s;
    s.fqn = PyToStr(PyRequireField(index, "fqn", what), what + " fqn");
    const std::string entry = fmt::format("{}['{}']", what, s.fqn);
    if (const PyValue* off = index.Field("offset"); off && off->kind != PyKind::kNone) {
      s.offset = PyToShape(*off, entry + " offset");
    }
    if (const PyValue* i = index.Field("index"); i && i->kind != PyKind::kNone) {
      s.index = PyToInt(*i, entry + " index");
    }
    if (!info.IsInstance(kTorch2Paths.filesystem, "_StorageInfo") &&
        !info.IsInstance(kTorch113Paths.filesystem, "_StorageInfo")) {
      Fail(ErrorKind::kCorruption, "{}: value is a {} {}, not a _StorageInfo", entry,
           PyKindName(info.kind), info.GlobalName());
    }
    s.relative_path =
        PyToStr(PyRequireField(info, "relative_path", entry), entry + " relative_path");
    int64_t offset = PyToInt(PyRequireField(info, "offset", entry), entry + " offset");
    int64_t length = PyToInt(PyRequireField(info, "length", entry), entry + " length");
    if (offset < 0 || length < 0 || offset > INT64_MAX - length) {
      Fail(ErrorKind::kCorruption, "{}: byte range at {} of {} bytes", entry, offset, length);
    }
    s.offset_in_file = static_cast<uint64_t>(offset);
    s.length = static_cast<uint64_t>(length);
    if (const PyValue* t = info.Field("transform_descriptors"); t && t->kind != PyKind::kNone) {
      for (const PyValue* d : PyToSequence(*t, entry + " transform_descriptors")) {
        s.transforms.push_back(PyToStr(*d, entry + " transform_descriptors"));
      }
    }
    return s;
  }

  const std::string& source_;
};

class Encoder {
 public:
  explicit Encoder(const DcpMetadata& md) : md_(md), paths_(PathsFor(md.target)) {}

  std::string Encode() {
    size_t chunks = 0;
    for (const DcpEntry& e : md_.entries) chunks += e.chunks.size();
    w_.Reserve(4096 + 512 * md_.entries.size() + 256 * chunks + 384 * md_.storage.size());
    w_.Object(paths_.metadata, "Metadata", [&] {
      w_.Dict(false, [&] {
        w_.Str("state_dict_metadata");
        w_.Dict(md_.entries.empty(), [&] {
          for (const DcpEntry& e : md_.entries) {
            w_.Str(e.fqn);
            Entry(e);
          }
        });
        w_.Str("planner_data");
        if (md_.planner_data) {
          w_.Dict(md_.planner_data->empty(), [&] {
            for (const auto& [fqn, path] : *md_.planner_data) {
              w_.Str(fqn);
              w_.Tuple(path.size(), [&] {
                for (const std::string& p : path) w_.Str(p);
              });
            }
          });
        } else {
          w_.None();
        }
        w_.Str("storage_data");
        w_.Dict(md_.storage.empty(), [&] {
          for (const DcpStorage& s : md_.storage) Storage(s);
        });
        Extras();
      });
    });
    return w_.Finish();
  }

 private:
  // Fields torch does not define: set as plain attributes on unpickling.
  void Extras() {
    if (!md_.mcore_orig_shapes.empty()) {
      w_.Str("mcore_data");
      w_.Dict(false, [&] {
        for (const auto& [key, shape] : md_.mcore_orig_shapes) {
          w_.Str(key);
          w_.Dict(false, [&] {
            w_.Str("nd_reformulated_orig_global_shape");
            w_.TupleOfInts(shape);
          });
        }
      });
    }
    if (!md_.distckpt_info.empty()) {
      w_.Str("distckpt");
      w_.Json(nlohmann::json(md_.distckpt_info));
    }
  }

  void Dataclass(std::string_view module, std::string_view name, size_t fields,
                 const PickleWriter::Emit& state) {
    w_.Object(module, name, [&] { w_.Dict(fields == 0, state); });
  }

  void Entry(const DcpEntry& e) {
    if (e.is_bytes) return Dataclass(paths_.metadata, "BytesStorageMetadata", 0, [] {});
    Dataclass(paths_.metadata, "TensorStorageMetadata", 3, [&] {
      w_.Str("properties");
      // TensorProperties has __setstate__: its state is the tuple
      // (dtype, layout, requires_grad, memory format, pin_memory).
      w_.Object(paths_.tensor_properties, "TensorProperties", [&] {
        w_.Tuple(5, [&] {
          w_.Global("torch", TorchDTypeName(e.dtype));
          w_.Reduce([&] { w_.Global("torch.serialization", "_get_layout"); }, 1,
                    [&] { w_.Str("torch.strided"); });
          w_.Bool(false);
          w_.Reduce([&] { w_.Global(paths_.tensor_properties, paths_.mem_format_enum); }, 1,
                    [&] { w_.Int(0); });  // TORCH_CONTIGUOUS_FORMAT
          w_.Bool(false);
        });
      });
      w_.Str("size");
      w_.TorchSize(e.size);
      w_.Str("chunks");
      w_.List(e.chunks.empty(), [&] {
        for (const DcpChunk& c : e.chunks) {
          Dataclass(paths_.metadata, "ChunkStorageMetadata", 2, [&] {
            w_.Str("offsets");
            w_.TorchSize(c.offsets);
            w_.Str("sizes");
            w_.TorchSize(c.sizes);
          });
        }
      });
    });
  }

  void Storage(const DcpStorage& s) {
    Dataclass(paths_.metadata, "MetadataIndex", 2, [&] {
      w_.Str("fqn");
      w_.Str(s.fqn);
      w_.Str("index");
      s.index ? w_.Int(*s.index) : w_.None();
      if (s.offset) {  // MetadataIndex.__init__ sets `offset` only when given
        w_.Str("offset");
        w_.TorchSize(*s.offset);
      }
    });
    Dataclass(paths_.filesystem, "_StorageInfo", 3, [&] {
      w_.Str("relative_path");
      w_.Str(s.relative_path);
      w_.Str("offset");
      w_.Int(static_cast<int64_t>(s.offset_in_file));
      w_.Str("length");
      w_.Int(static_cast<int64_t>(s.length));
      if (!s.transforms.empty()) {  // as torch >= 2.7 writes them; distckpt never does
        w_.Str("transform_descriptors");
        w_.List(false, [&] {
          for (const std::string& t : s.transforms) w_.Str(t);
        });
      }
    });
  }

  const DcpMetadata& md_;
  const ClassPaths& paths_;
  PickleWriter w_;
};

}  // namespace

DcpMetadata DecodeDcpMetadata(std::string_view pickle, const std::string& source) {
  PyTree tree = Unpickle(pickle, source);
  return Decoder(source).Decode(*tree.root());
}

std::string EncodeDcpMetadata(const DcpMetadata& metadata) { return Encoder(metadata).Encode(); }

}  // namespace distckpt
