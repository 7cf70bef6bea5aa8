#include "format/dcp/allow_list.h"

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <unordered_set>

namespace distckpt {
namespace {

struct AllowedModule {
  std::string_view module;
  std::initializer_list<std::string_view> names;
};

constexpr std::string_view kDcpMetadataClasses[] = {"Metadata", "TensorStorageMetadata",
                                                    "ChunkStorageMetadata", "BytesStorageMetadata",
                                                    "MetadataIndex"};

const std::unordered_set<std::string>& AllowList() {
  static const std::unordered_set<std::string> allowed = [] {
    const AllowedModule modules[] = {
        {"torch.distributed.checkpoint.metadata",
         {"TensorProperties", "_MEM_FORMAT_ENCODING", "StorageMeta"}},
        {"torch.distributed._shard.sharded_tensor.metadata",
         {"TensorProperties", "MEM_FORMAT_ENCODING"}},
        {"torch.distributed.checkpoint.filesystem", {"_StorageInfo", "_StoragePrefix"}},
        {"torch.distributed._shard.checkpoint.filesystem", {"_StorageInfo", "_StoragePrefix"}},
        {"torch.distributed.checkpoint.planner",
         {"SavePlan", "WriteItem", "WriteItemType", "TensorWriteData"}},
        {"torch.distributed._shard.checkpoint.planner",
         {"SavePlan", "WriteItem", "WriteItemType", "TensorWriteData"}},
        {"megatron.core.dist_checkpointing.strategies.torch", {"MCoreMetadata", "MCoreSavePlan"}},
        {"torch",
         {"Size",
          "float64",
          "float32",
          "float16",
          "bfloat16",
          "float8_e4m3fn",
          "float8_e5m2",
          "float8_e4m3fnuz",
          "float8_e5m2fnuz",
          "int8",
          "int16",
          "int32",
          "int64",
          "uint8",
          "uint16",
          "uint32",
          "uint64",
          "bool",
          "complex32",
          "complex64",
          "complex128",
          "qint8",
          "quint8",
          "qint32",
          "quint4x2",
          "quint2x4",
          "DoubleStorage",
          "FloatStorage",
          "HalfStorage",
          "BFloat16Storage",
          "LongStorage",
          "IntStorage",
          "ShortStorage",
          "CharStorage",
          "ByteStorage",
          "BoolStorage",
          "ComplexFloatStorage",
          "ComplexDoubleStorage",
          "QUInt8Storage",
          "QInt8Storage",
          "QInt32Storage",
          "QUInt4x2Storage",
          "QUInt2x4Storage"}},
        {"torch.storage", {"UntypedStorage"}},
        {"torch.serialization", {"_get_layout"}},
        {"torch._utils", {"_rebuild_tensor_v2", "_rebuild_tensor_v3"}},
        {"collections", {"OrderedDict"}},
        {"builtins", {"getattr"}},
        {"pathlib", {"PosixPath"}},
        {"pathlib._local", {"PosixPath"}},
        // Megatron's common.pt (megatron/core/safe_globals.py, v0.15).
        {"argparse", {"Namespace"}},
        {"types", {"SimpleNamespace"}},
        {"numpy", {"ndarray", "dtype"}},
        {"numpy.core.multiarray", {"_reconstruct"}},
        {"numpy._core.multiarray", {"_reconstruct"}},
        {"numpy.dtypes", {"UInt32DType"}},
        // numpy's bytes under pickle protocol 2 (np.random.get_state() in
        // Megatron's rng_state); torch's weights-only unpickler allows it too.
        // The unpickler evaluates it only as encode(str, "latin1").
        {"_codecs", {"encode"}},
        {"megatron.core.enums", {"ModelType"}},
        // Megatron-Core 0.16-0.20 (safe_globals.py): args.exit_signal is a
        // signal.Signals, validate_args stores CudaGraph* enums, args may hold
        // an OptimizerConfig and BytesIO / torch.Generator states.
        {"megatron.core.transformer.enums",
         {"AttnBackend", "ModelType", "CudaGraphModule", "CudaGraphScope",
          "InferenceCudaGraphScope"}},
        {"megatron.core.rerun_state_machine", {"RerunDiagnostic", "RerunMode", "RerunState"}},
        {"megatron.core.optimizer.optimizer_config", {"OptimizerConfig"}},
        {"megatron.core.optimizer", {"OptimizerConfig"}},
        {"signal", {"Signals"}},
        {"io", {"BytesIO"}},
        {"_io", {"BytesIO"}},
        {"torch._C", {"Generator"}},
        {"torch", {"Generator"}},
    };
    std::unordered_set<std::string> set;
    for (const AllowedModule& m : modules) {
      for (std::string_view name : m.names) set.insert(fmt::format("{}.{}", m.module, name));
    }
    for (std::string_view module : {"torch.distributed.checkpoint.metadata",
                                    "torch.distributed._shard.checkpoint.metadata"}) {
      for (std::string_view name : kDcpMetadataClasses)
        set.insert(fmt::format("{}.{}", module, name));
    }
    return set;
  }();
  return allowed;
}

}  // namespace

bool IsAllowedGlobal(std::string_view module, std::string_view name) {
  return AllowList().contains(fmt::format("{}.{}", module, name));
}

bool IsForbiddenGlobal(std::string_view module, std::string_view name) {
  // Whole modules (and their submodules) whose globals run code or touch the system.
  static constexpr std::string_view kModules[] = {"os",
                                                  "posix",
                                                  "nt",
                                                  "subprocess",
                                                  "_posixsubprocess",
                                                  "sys",
                                                  "importlib",
                                                  "imp",
                                                  "runpy",
                                                  "shutil",
                                                  "socket",
                                                  "ctypes",
                                                  "_ctypes",
                                                  "pickle",
                                                  "_pickle",
                                                  "marshal",
                                                  "multiprocessing",
                                                  "threading",
                                                  "_thread",
                                                  "asyncio",
                                                  "code",
                                                  "codeop",
                                                  "pty",
                                                  "pdb",
                                                  "bdb",
                                                  "timeit",
                                                  "trace",
                                                  "profile",
                                                  "cProfile",
                                                  "webbrowser",
                                                  "functools",
                                                  "operator",
                                                  "_operator",
                                                  "inspect",
                                                  "site",
                                                  "sitecustomize",
                                                  "pkgutil",
                                                  "zipimport",
                                                  "tempfile",
                                                  "glob",
                                                  "fileinput",
                                                  "commands",
                                                  "popen2",
                                                  "platform",
                                                  "sysconfig",
                                                  "distutils",
                                                  "setuptools",
                                                  "pip",
                                                  "ensurepip",
                                                  "venv",
                                                  "dill",
                                                  "cloudpickle",
                                                  "joblib",
                                                  "yaml",
                                                  "http",
                                                  "urllib",
                                                  "ftplib",
                                                  "smtplib",
                                                  "telnetlib",
                                                  "xmlrpc",
                                                  "ssl",
                                                  "select",
                                                  "selectors",
                                                  "mmap",
                                                  "resource",
                                                  "gc",
                                                  "weakref",
                                                  "builtins",
                                                  "__builtin__",
                                                  "torch.hub",
                                                  "torch.jit",
                                                  "torch.ops",
                                                  "torch.classes",
                                                  "torch.package",
                                                  "torch.utils",
                                                  "torch.serialization",
                                                  "numpy.lib",
                                                  "numpy.testing",
                                                  "numpy.f2py",
                                                  "_io",
                                                  "io",
                                                  "signal",
                                                  "types",
                                                  "__main__"};
  // Plain data types of builtins (pickle names set, frozenset, ... this way).
  static constexpr std::string_view kDataBuiltins[] = {
      "set", "frozenset", "bytearray", "complex", "slice", "range", "bytes", "str",
      "int", "float",     "bool",      "list",    "tuple", "dict",  "object"};
  if (IsAllowedGlobal(module, name)) return false;  // BytesIO, Signals, SimpleNamespace, getattr
  if (module == "torch" && (name == "load" || name == "from_file")) return true;
  if (module == "numpy" && (name == "load" || name == "fromfile" || name == "loadtxt")) return true;
  if (module == "builtins" || module == "__builtin__") {
    for (std::string_view data : kDataBuiltins) {
      if (name == data) return false;
    }
    return true;
  }
  for (std::string_view m : kModules) {
    if (module == m ||
        (module.size() > m.size() && module.starts_with(m) && module[m.size()] == '.')) {
      return true;
    }
  }
  // Dunder attributes (__import__, __reduce__, ...) of anything but copyreg's
  // own protocol helpers (__newobj__, __newobj_ex__).
  return module != "copyreg" &&
         (name.starts_with("__") || name.find(".__") != std::string_view::npos);
}

bool IsAllowedVerlGlobal(std::string_view module, std::string_view name) {
  static const std::unordered_set<std::string> dtensor{
      "torch._tensor._rebuild_from_type_v2",
      "torch._utils._rebuild_wrapper_subclass",
      "torch.device",
      "torch.distributed.tensor.DTensor",
      "torch.distributed._tensor.api.DTensor",
      "torch.distributed.tensor._dtensor_spec.DTensorSpec",
      "torch.distributed.tensor._dtensor_spec.TensorMeta",
      "torch.distributed.device_mesh.DeviceMesh",
      "torch.distributed.tensor.placement_types.Shard",
      "torch.distributed.tensor.placement_types.Replicate",
  };
  return IsAllowedGlobal(module, name) || dtensor.contains(fmt::format("{}.{}", module, name));
}

}  // namespace distckpt
