"""Real torch (2.x, gloo CPU ranks) on Megatron's fsdp_dtensor checkpoints.

  fsdp_dtensor_peer.py write OUT WORLD EXPECTED [--fixture]
      torch writes an fsdp_dtensor-style checkpoint from WORLD ranks: a tiny
      GPT under Megatron's keys (model.module.decoder.layers.<i>...., SwiGLU
      fc1 as weight_w / weight_v, optimizer.state.module.module.module.<p>.
      exp_avg[_sq]), every parameter a DTensor over a 1-D mesh with uneven
      Shard(0) row chunks as Megatron-FSDP holds them (some ranks empty), and
      the non-tensor values as DCP bytes items (args as argparse.Namespace,
      iteration, checkpoint_version, opt_param_scheduler, rng_state). The
      chunk metadata is given to DCP the way Megatron's uneven_dtensor.py
      does it: the offset along dim 0 is the sum of the lower ranks' rows
      (all-gathered), set as the local tensor's __create_chunk_list__ /
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
      a distckpt scenario requesting every tensor of CKPT (f32, rows split
      over dp), for `distckpt verify` / `reshard --spec OUT`.
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


def make_uneven_dtensor(local, mesh, global_shape):
    """A DTensor whose rank-local rows are `local`, with DCP chunk metadata for
    uneven Shard(0) placement (Megatron's uneven_dtensor.py, re-done here)."""
    shapes = [None] * dist.get_world_size()
    dist.all_gather_object(shapes, list(local.shape))
    rank = dist.get_rank()
    offsets = [0] * len(global_shape)
    offsets[0] = sum(s[0] for s in shapes[:rank])
    stride = torch.empty(global_shape).stride()
    dt = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(global_shape),
                            stride=stride)
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


def write_worker(rank, world, out, expected, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_cp",))
    full = full_tensors()
    rows = fsdp_rows(model_shapes(), world)
    state = {}
    for key, t in full.items():
        name = key[len("model.module."):] if key.startswith("model.") else key.split(
            "module.module.module.", 1)[1].rsplit(".", 1)[0]
        start, stop = rows[name][rank]
        state[key] = make_uneven_dtensor(t[start:stop].clone(), mesh, tuple(t.shape))
    state.update(common_values())
    dcp.save(state, checkpoint_id=out)
    if rank == 0:
        os.makedirs(expected, exist_ok=True)
        torch.save(full, f"{expected}/full.pt")
        chunks = {key: sum(1 for r in range(world) if rows[name][r][1] > rows[name][r][0])
                  for key, name in ((k, k[len("model.module."):] if k.startswith("model.") else
                                     k.split("module.module.module.", 1)[1].rsplit(".", 1)[0])
                                    for k in full)}
        c = common_values()
        c["args"] = vars(c["args"])
        c["rng_state"] = {"(0, 0)": {"0": {"random_rng_state": [3, [1, 2, 3], None],
                                           "rng_tracker_states": {"model-parallel-rng": 7}}}}
        doc = {"writer": f"torch {torch.__version__}, {world} gloo ranks, fsdp_dtensor_peer.py write",
               "tensors": {k: {"shape": list(t.shape), "chunks": chunks[k],
                               "values": t.flatten().tolist()} for k, t in full.items()},
               "common": c}
        with open(f"{expected}/expected.json", "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
    dist.barrier()
    dist.destroy_process_group()


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
    dist.barrier()
    dist.destroy_process_group()


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
    tensors = [{"key": k, "shape": list(m.size), "dtype": "f32", "shard": {"0": "dp"}}
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
        mp.spawn(write_worker, args=(world, out, expected, free_port()), nprocs=world)
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
