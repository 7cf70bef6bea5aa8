// The globals the safe unpickler (unpickler.h) resolves: the DCP metadata
// classes under their torch 2.x and 1.13 module paths (Metadata,
// TensorStorageMetadata, ChunkStorageMetadata, BytesStorageMetadata,
// MetadataIndex, StorageMeta, TensorProperties and its memory-format enum,
// _StorageInfo, and the planner classes of the SavePlans Megatron keeps in
// .metadata), Megatron's MCoreMetadata / MCoreSavePlan, torch.Size, torch
// dtypes, torch.serialization._get_layout, torch._utils._rebuild_tensor_v2
// and _v3, storage classes, collections.OrderedDict,
// pathlib(._local).PosixPath, builtins.getattr (the unpickler allows it only
// as getattr(<allowed class>, "<name>"), the Python 3.11 spelling of the
// memory-format enum), and the classes Megatron's common.pt holds
// (argparse.Namespace, types.SimpleNamespace, numpy arrays and dtypes,
// Megatron's enums, signal.Signals, io.BytesIO, torch._C.Generator,
// OptimizerConfig: megatron/core/safe_globals.py of Megatron-Core 0.13-0.20).
//
// A global off the list is *unknown*: the unpickler carries it as inert data
// (unknown_globals.h) unless the policy refuses unknown classes. A
// *forbidden* global (IsForbiddenGlobal: code execution or system access when
// a Python unpickler resolves it, such as os.system or builtins.eval) is
// refused under every policy, so distckpt never writes one into a checkpoint
// that a later torch.load(weights_only=False) would execute.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_ALLOW_LIST_H_
#define DISTCKPT_FORMAT_DCP_ALLOW_LIST_H_

#include <string_view>

namespace distckpt {

// True if the global `module.name` is on the allow-list.
bool IsAllowedGlobal(std::string_view module, std::string_view name);

// True if resolving `module.name` in Python runs code or reaches the system:
// the modules os, posix, nt, subprocess, sys, importlib, runpy, shutil,
// socket, ctypes, pickle, marshal, multiprocessing, code, pty, functools,
// operator, ... (and their submodules), builtins other than plain data types,
// io / _io other than BytesIO, signal other than Signals, types other than
// SimpleNamespace, and torch's loaders, hub, jit, ops and packages.
bool IsForbiddenGlobal(std::string_view module, std::string_view name);

// The allow-list for verl's per-rank FSDP files (format/verl/verl_files.h),
// a superset of the above with only the classes torch.save uses to rebuild
// a DTensor: torch._tensor._rebuild_from_type_v2,
// torch._utils._rebuild_wrapper_subclass, torch.device,
// torch.distributed.tensor.DTensor (and its torch.distributed._tensor.api
// path), torch.distributed.tensor._dtensor_spec.{DTensorSpec, TensorMeta},
// torch.distributed.device_mesh.DeviceMesh, and the placements
// torch.distributed.tensor.placement_types.{Shard, Replicate}, and
// _codecs.encode (numpy's RNG state arrays in extra_state: evaluated by the
// unpickler only as encode(str, "latin1") -> bytes). As everywhere, classes
// are recorded, never called.
bool IsAllowedVerlGlobal(std::string_view module, std::string_view name);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_ALLOW_LIST_H_
