"""Real torch (2.x, gloo CPU ranks) on Megatron's fsdp_dtensor checkpoints.

  fsdp_dtensor_peer.py write OUT WORLD EXPECTED [TP]
      torch writes an fsdp_dtensor-style checkpoint from WORLD ranks: a tiny
      GPT under Megatron's keys (model.module.decoder.layers.<i>...., SwiGLU
      fc1 as weight_w / weight_v, optimizer.state.module.module.module.<p>.
      exp_avg[_sq]), every parameter a DTensor over a 1-D mesh with uneven
      Shard(0) row chunks as Megatron-FSDP holds them (some ranks empty), or
      with TP > 1 over the 2-D mesh (dp_cp, tp) with [Shard(0), Shard(tp_dim)]
      (TP's shard cut first, FSDP's uneven rows of it; replicated over TP:
      [Shard(0), Replicate()]), and
      the non-tensor values as DCP bytes items (args as argparse.Namespace,
      iteration, checkpoint_version, opt_param_scheduler, rng_state). The
      chunk metadata is given to DCP the way Megatron's uneven_dtensor.py
      does it: the offset along dim 0 is the sum of the lower DP ranks' rows
      (all-gathered), then TP's offset the sum of the lower TP ranks' extents,
      set as the local tensor's __create_chunk_list__ /
      __create_write_items__ (an empty shard writes no item). EXPECTED gets
      full.pt (every full tensor) and expected.json (shapes, chunk counts,
      values, common state as distckpt reads it) for the fixture test.
  fsdp_dtensor_peer.py load CKPT WORLD DUMPS
      torch on WORLD ranks loads every tensor of CKPT (any DCP checkpoint,
      e.g. distckpt's fsdp-dtensor save) into DTensors distributed with
      Shard(0) over init_device_mesh("cpu", (WORLD,)), plus its top-level
      bytes items, with torch.distributed.checkpoint.load; rank 0 compares
      every full tensor with DUMPS/<key>.bin (distckpt dump) element by element.
  fsdp_dtensor_peer.py check DUMPS EXPECTED
      every EXPECTED/full.pt tensor equals DUMPS/<key>.bin.
  fsdp_dtensor_peer.py spec CKPT OUT
      a distckpt scenario requesting every tensor of CKPT (f32; rows over dp,
      columns over tp, torch.chunk-split), for `distckpt verify` / `reshard`.
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

LAYERS, HIDDEN, FFN, VOCAB, HEADS = 2, 8, 12, 20, 2


def model_shapes():
    """Megatron GPT parameter names (per layer, SwiGLU split) and shapes, in module order."""
    shapes = {"embedding.word_embeddings.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"decoder.layers.{i}."
        shapes[p + "self_attention.linear_qkv.layer_norm_weight"] = (HIDDEN,)
        shapes[p + "self_attention.linear_qkv.weight"] = (3 * HIDDEN, HIDDEN)
        shapes[p + "self_attention.linear_proj.weight"] = (HIDDEN, HIDDEN)
        shapes[p + "mlp.linear_fc1.layer_norm_weight"] = (HIDDEN,)
        shapes[p + "mlp.linear_fc1.weight_w"] = (FFN, HIDDEN)
        shapes[p + "mlp.linear_fc1.weight_v"] = (FFN, HIDDEN)
        shapes[p + "mlp.linear_fc2.weight"] = (HIDDEN, FFN)
    shapes["decoder.final_layernorm.weight"] = (HIDDEN,)
    shapes["output_layer.weight"] = (VOCAB, HIDDEN)
    return shapes


def full_tensors():
    """Every full tensor (fp32 main weights and Adam moments): exact binary fractions."""
    out = {}
    for n, (name, shape) in enumerate(model_shapes().items()):
        numel = 1
        for s in shape:
            numel *= s
        base = torch.arange(numel, dtype=torch.float64)
        for k, (key, scale) in enumerate([(f"model.module.{name}", 0.25),
                                          (f"optimizer.state.module.module.module.{name}.exp_avg",
                                           -0.125),
                                          (f"optimizer.state.module.module.module.{name}.exp_avg_sq",
                                           0.0625)]):
            out[key] = ((base % 251) * scale + n + 1000 * k).to(torch.float32).reshape(shape)
    return out


def fsdp_rows(shapes, world):
    """Rows of each parameter per rank, as Megatron-FSDP's buckets give them: the
    parameters of a unit (layer) laid out flat, the buffer split evenly over the
    ranks, and each row owned by the rank its first element falls in."""
    units = {}
    for name, shape in shapes.items():
        unit = name.split(".")[2] if name.startswith("decoder.layers.") else "root"
        units.setdefault(unit, []).append(name)
    rows = {}
    for names in units.values():
        total = sum(torch.Size(shapes[n]).numel() for n in names)
        per_rank = -(-total // world)
        cursor = 0
        for n in names:
            shape = shapes[n]
            row = torch.Size(shape[1:]).numel()
            owner = [min((cursor + r * row) // per_rank, world - 1) for r in range(shape[0])]
            rows[n] = [(owner.index(k), len(owner) - owner[::-1].index(k)) if k in owner else (0, 0)
                       for k in range(world)]
            cursor += shape[0] * row
    return rows


def tp_dim(name):
    """The axis Megatron's TP splits (None: replicated over TP)."""
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return 1
    if name.endswith(("word_embeddings.weight", "output_layer.weight", "linear_qkv.weight",
                      "weight_w", "weight_v")):
        return 0
    return None


def make_uneven_dtensor(local, mesh, global_shape, tdim):
    """A DTensor whose rank-local block is `local` (FSDP's uneven rows of TP's
    shard), with DCP chunk metadata for uneven placement (Megatron's
    uneven_dtensor.py, re-done here): along each sharded mesh dim, innermost
    (dp_cp) first, the offset is the sum of the lower ranks' extents."""
    offsets = [0] * len(global_shape)
    cumulative = list(local.shape)
    dims = [(0, 0)] + ([(1, tdim)] if mesh.ndim > 1 and tdim is not None else [])
    for mesh_dim, axis in dims:
        group = mesh.get_group(mesh_dim)
        shapes = [None] * dist.get_world_size(group)
        dist.all_gather_object(shapes, cumulative, group=group)
        rank = dist.get_rank(group)
        offsets[axis] += sum(s[axis] for s in shapes[:rank])
        cumulative[axis] = sum(s[axis] for s in shapes)
    placements = [Shard(0)]
    if mesh.ndim > 1:
        placements.append(Shard(tdim) if tdim is not None else Replicate())
    stride = torch.empty(global_shape).stride()
    dt = DTensor.from_local(local, mesh, placements, run_check=False,
                            shape=torch.Size(global_shape), stride=stride)
    chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=local.shape)

    def write_items(fqn, tensor):
        if tensor.to_local().numel() == 0:
            return []
        return [WriteItem(type=WriteItemType.SHARD, index=MetadataIndex(fqn, chunk.offsets),
                          tensor_data=TensorWriteData(
                              chunk=chunk,
                              properties=TensorProperties.create_from_tensor(tensor.to_local()),
                              size=tensor.size()))]

    dt._local_tensor.__create_chunk_list__ = lambda: [chunk]
    dt._local_tensor.__create_write_items__ = write_items
    return dt


def common_values():
    args = argparse.Namespace(num_layers=LAYERS, hidden_size=HIDDEN, ffn_hidden_size=FFN,
                              num_attention_heads=HEADS, swiglu=True, bf16=True,
                              ckpt_format="fsdp_dtensor", use_megatron_fsdp=True, lr=0.001)
    return {
        "args": args,
        "iteration": 5,
        "checkpoint_version": 3.0,
        "num_floating_point_operations_so_far": 123456.0,
        "opt_param_scheduler": {"max_lr": 0.001, "min_lr": 0.0, "num_steps": 5},
        "rng_state": {"(0, 0)": [{"random_rng_state": (3, (1, 2, 3), None),
                                  "rng_tracker_states": {"model-parallel-rng": 7}}]},
    }


def param_name(key):
    if key.startswith("model.module."):
        return key[len("model.module."):]
    return key.split("module.module.module.", 1)[1].rsplit(".", 1)[0]


def tp_local_shapes(tp):
    shapes = {}
    for name, shape in model_shapes().items():
        shape = list(shape)
        if tp_dim(name) is not None:
            shape[tp_dim(name)] //= tp
        shapes[name] = tuple(shape)
    return shapes


def leave():
    """Ends a rank once every rank is done (after a barrier), with os._exit after
    flushing: no dist.destroy_process_group() and no interpreter teardown. Under
    torch 2.6 (Debian, Python 3.13) destroying the gloo group deadlocks now and then
    (~ProcessGroupGloo joins its worker thread while the main thread holds the GIL:
    scenarios/peer/torch_peer.py, _rank_main), which hung this script's spawn until
    its caller's timeout."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def write_worker(rank, world, out, expected, port, tp):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dp = world // tp
    if tp == 1:
        mesh = init_device_mesh("cpu", (dp,), mesh_dim_names=("dp_cp",))
    else:
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp_cp", "tp"))
    d, t = rank // tp, rank % tp
    full = full_tensors()
    rows = fsdp_rows(tp_local_shapes(tp), dp)
    state = {}
    for key, tensor in full.items():
        name = param_name(key)
        tdim = tp_dim(name)
        block = tensor
        if tp > 1 and tdim is not None:  # TP's shard first (Shard(tp_dim) inside)
            block = tensor.chunk(tp, dim=tdim)[t]
        start, stop = rows[name][d]
        state[key] = make_uneven_dtensor(block[start:stop].clone(), mesh, tuple(tensor.shape),
                                         tdim)
    state.update(common_values())
    dcp.save(state, checkpoint_id=out)
    if rank == 0:
        os.makedirs(expected, exist_ok=True)
        torch.save(full, f"{expected}/full.pt")
        chunks = {}
        for key in full:
            name = param_name(key)
            blocks = tp if tp_dim(name) is not None else 1
            chunks[key] = blocks * sum(1 for r in range(dp) if rows[name][r][1] > rows[name][r][0])
        c = common_values()
        # distckpt's JSON form of a pickled object (torch_save.h): the class is kept.
        c["args"] = {"__object__": "argparse.Namespace", "args": [], "state": vars(c["args"])}
        c["rng_state"] = {"(0, 0)": {"0": {"random_rng_state": [3, [1, 2, 3], None],
                                           "rng_tracker_states": {"model-parallel-rng": 7}}}}
        mesh_text = f"({dp},)" if tp == 1 else f"({dp}, {tp}) (dp_cp, tp)"
        doc = {"writer": f"torch {torch.__version__}, {world} gloo ranks, mesh {mesh_text}, "
                         "fsdp_dtensor_peer.py write",
               "tensors": {k: {"shape": list(v.shape), "chunks": chunks[k],
                               "values": v.flatten().tolist()} for k, v in full.items()},
               "common": c}
        with open(f"{expected}/expected.json", "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
    leave()


def load_worker(rank, world, ckpt, dumps, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    md = dcp.FileSystemReader(ckpt).read_metadata()
    state = {}
    for fqn, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            zeros = torch.zeros(m.size, dtype=m.properties.dtype)
            placements = [Shard(0)] if len(m.size) > 0 else [Replicate()]
            state[fqn] = distribute_tensor(zeros, mesh, placements)
        elif "." not in fqn and "/" not in fqn:
            state[fqn] = None  # a top-level bytes item (common state)
    dcp.load(state, checkpoint_id=ckpt)
    tensors = elements = 0
    for fqn in sorted(k for k, v in state.items() if isinstance(v, DTensor)):
        full = state[fqn].full_tensor()
        if rank == 0:
            raw = bytearray(open(os.path.join(dumps, fqn + ".bin"), "rb").read())
            want = torch.frombuffer(raw, dtype=full.dtype).reshape(full.shape) if raw else \
                torch.zeros(full.shape, dtype=full.dtype)
            assert torch.equal(full, want), f"{fqn}: torch's load differs from distckpt dump"
            tensors += 1
            elements += full.numel()
    if rank == 0:
        values = {k: v for k, v in state.items() if not isinstance(v, DTensor)}
        print(f"torch loaded {tensors} tensors ({elements} elements) on {world} ranks as DTensors "
              f"Shard(0): every element equal to distckpt dump; bytes items {sorted(values)}")
        for k in sorted(values):
            print(f"  {k} = {values[k]!r}")
    leave()


def check(dumps, expected):
    full = torch.load(f"{expected}/full.pt")
    n = 0
    for key, t in full.items():
        raw = bytearray(open(os.path.join(dumps, key + ".bin"), "rb").read())
        got = torch.frombuffer(raw, dtype=t.dtype).reshape(t.shape)
        assert torch.equal(got, t), f"{key}: distckpt's value differs from torch's full tensor"
        n += t.numel()
    print(f"{len(full)} tensors ({n} elements) equal torch's full tensors")


def spec(ckpt, out):
    md = dcp.FileSystemReader(ckpt).read_metadata()
    tensors = [{"key": k, "shape": list(m.size), "dtype": "f32", "split": "chunk",
                "shard": {"0": "dp", "1": "tp"} if len(m.size) == 2 else {"0": "dp"}}
               for k, m in sorted(md.state_dict_metadata.items())
               if isinstance(m, TensorStorageMetadata) and m.properties.dtype == torch.float32]
    with open(out, "w") as f:
        json.dump({"name": "fsdp-dtensor-peer", "seed": 1, "tensors": tensors}, f, indent=1)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    mode = sys.argv[1]
    if mode == "write":
        out, world, expected = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        tp = int(sys.argv[5]) if len(sys.argv) > 5 else 1
        assert world % tp == 0, "WORLD must be a multiple of TP"
        mp.spawn(write_worker, args=(world, out, expected, free_port(), tp), nprocs=world)
    elif mode == "load":
        ckpt, world, dumps = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        mp.spawn(load_worker, args=(world, ckpt, dumps, free_port()), nprocs=world)
    elif mode == "check":
        check(sys.argv[2], sys.argv[3])
    elif mode == "spec":
        spec(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
