#!/usr/bin/env python3
"""The PyTorch side of distckpt's DCP interop tests (ctest -L peer); runs under
real torch 1.13 (DCP at torch.distributed._shard.checkpoint) or torch 2.x.
peer_test.sh drives it; checkpoints are exchanged through /tmp.

  torch_peer.py keys INSPECT_JSON        tensor keys of `distckpt inspect --json`, one a line
  torch_peer.py load CKPT DUMPS          torch loads distckpt's checkpoint under its own
                                         sharding (2 processes: DTensor Shard(0) on 2.x,
                                         ShardedTensor rows on 1.13) and compares every
                                         element with DUMPS/<key>.bin (`distckpt dump`);
                                         N-D flattened tensors via Megatron's mcore_data
  torch_peer.py save CKPT EXPECTED       torch writes a checkpoint (2.x: 3 processes with
                                         DTensor Shard(0) uneven and empty, Shard(1), bf16
                                         3-D Shard(1); 1.13: 2 processes with ShardedTensor
                                         rows and columns; both: a transposed tensor, a view
                                         with a storage offset, a tensor of no elements,
                                         bytes items)
                                         and EXPECTED/<key>.bin (global bytes) plus
                                         EXPECTED/common.json (the bytes items' values)
  torch_peer.py check-common INSPECT_JSON EXPECTED_COMMON
                                         distckpt's common state equals torch's bytes items

Exit status 0 = every check holds; a failure prints what differs.
"""
import datetime
import faulthandler
import itertools
import json
import os
import socket
import sys
import time
import traceback


# torch is imported by the commands that need it (`keys` and `check-common` start in
# milliseconds); forked ranks inherit it.
torch = dist = dcp = TensorStorageMetadata = None
TORCH2 = False

# Seconds a rank may take before it is stopped with a traceback of every thread
# (faulthandler), so a hang fails fast instead of reaching ctest's timeout.
WATCHDOG_S = int(os.environ.get("DISTCKPT_PEER_WATCHDOG_S", "120"))


def import_torch():
    global torch, dist, dcp, TensorStorageMetadata, TORCH2
    import torch
    import torch.distributed as dist

    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        TORCH2 = True
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from dataclass_shim import allow_unhashable_dataclass_defaults

        allow_unhashable_dataclass_defaults()
        import torch.distributed._shard.checkpoint as dcp
        from torch.distributed._shard.checkpoint.metadata import TensorStorageMetadata


def save_state(state, path):
    if TORCH2:
        dcp.save(state, checkpoint_id=path)
    else:
        dcp.save_state_dict(state, dcp.FileSystemWriter(path))


def load_state(state, path):
    if TORCH2:
        dcp.load(state, checkpoint_id=path)
    else:
        dcp.load_state_dict(state, dcp.FileSystemReader(path))


# ----------------------------------------------------------------- values and bytes
def make(shape, kind):
    """Deterministic global values: f32 i*0.5, bf16 i*0.25-1, i64 i*1000000007-3."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    if kind == "f32":
        t = i.to(torch.float32) * 0.5
    elif kind == "bf16":
        t = (i.to(torch.float32) * 0.25 - 1).to(torch.bfloat16)
    else:
        t = i * 1000000007 - 3
    return t.reshape(shape)


def raw(t):
    """Row-major little-endian bytes of a tensor's elements."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    elif t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
        t = t.view(torch.uint8)  # float8
    return t.numpy().tobytes()


def chunk_rows(n, world, rank):
    """Rows of `rank` under torch.chunk semantics (DTensor Shard): ceil, trailing short or empty."""
    size = -(-n // world) if n else 0
    start = min(rank * size, n)
    return start, min(start + size, n) - start


def reformulate(expected, orig_shape, stored_shape, element):
    """Megatron's N-D flattened layout: global [X, Y, Z] with chunk [x, y, z] is stored as
    F + (x*y*z,), F = fragments per axis; `expected` holds the original row-major bytes."""
    import numpy as np

    frags = list(stored_shape[:-1])
    local = [o // f for o, f in zip(orig_shape, frags)]
    src = np.frombuffer(expected, dtype=np.uint8).reshape(list(orig_shape) + [element])
    out = np.empty(frags + [stored_shape[-1] * element], dtype=np.uint8)
    for idx in itertools.product(*[range(f) for f in frags]):
        box = tuple(slice(i * l, (i + 1) * l) for i, l in zip(idx, local))
        out[idx] = src[box].reshape(-1)
    return out.tobytes()


# ----------------------------------------------------------------- processes
def run_ranks(world, fn, *args):
    """fn(rank, world, *args) (False = this rank's checks failed) in `world` processes forked from this one (torch already
    imported: no re-import per rank) and joined by a gloo process group. Returns when
    every rank has exited; a rank that fails stops the others (they would wait in a
    collective), and so does the watchdog."""
    import multiprocessing
    import multiprocessing.connection

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch 2.6 has no libuv
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.stdout.flush()
    sys.stderr.flush()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank_main, args=(rank, world, fn, args)) for rank in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + WATCHDOG_S + 10
    while any(p.is_alive() for p in procs):
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for p in procs:
                if p.is_alive():
                    p.kill()
            break
        multiprocessing.connection.wait([p.sentinel for p in procs if p.is_alive()], timeout=1)
    for p in procs:
        p.join()
    codes = [p.exitcode for p in procs]
    if any(codes):
        raise SystemExit(f"torch ranks exited with {codes} (negative: killed after another rank failed "
                         f"or the {WATCHDOG_S} s watchdog)")


def _rank_main(rank, world, fn, args):
    """One rank. The ranks agree on pass / fail with an all_reduce, then leave with
    os._exit after flushing, without dist.destroy_process_group() and without the
    interpreter's teardown. Under torch 2.6 (Debian, Python 3.13) destroying the gloo
    group deadlocks now and then (about 1 run in 6): ~ProcessGroupGloo joins its worker
    thread while the main thread holds the GIL, and the worker, dropping the last
    reference to a finished collective's tensor, waits for the GIL to free its Python
    object (c10::impl::PyObjectSlot::maybe_destroy_pyobj) -- seen with gdb on the hung
    rank. The same destructor runs at interpreter exit. Nothing of value happens in
    either once the checks are done, and skipping them also saves seconds per process.
    """
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    code = 0
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=WATCHDOG_S))
        ok = torch.tensor([0 if fn(rank, world, *args) is False else 1])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank agrees on pass / fail
        code = 0 if ok.item() else 1
        # No destroy_process_group(): see the docstring.
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: B902 - any failure becomes this rank's exit status
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ----------------------------------------------------------------- torch loads distckpt's checkpoint
def _target(size, dtype, rank, world):
    """A zero destination sharded by rows over `world` ranks, or a plain tensor."""
    size = list(size)
    start, rows = chunk_rows(size[0], world, rank) if size else (0, 0)
    if TORCH2 and size:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (world,))
        local = torch.zeros([rows] + size[1:], dtype=dtype)
        stride = [1] * len(size)
        for d in range(len(size) - 2, -1, -1):
            stride[d] = stride[d + 1] * size[d + 1]
        return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(size),
                                  stride=tuple(stride)), start, rows
    if not TORCH2 and size and all(chunk_rows(size[0], world, r)[1] > 0 for r in range(world)):
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards

        local = torch.zeros([rows] + size[1:], dtype=dtype)
        shard = Shard.from_tensor_and_offsets(local, [start] + [0] * (len(size) - 1), rank)
        return init_from_local_shards([shard], *size), start, rows
    return torch.zeros(size, dtype=dtype), 0, size[0] if size else 0


def _local(t):
    if hasattr(t, "to_local"):
        return t.to_local()
    if hasattr(t, "local_shards"):
        return t.local_shards()[0].tensor
    return t


def _load_worker(rank, world, ckpt, dumps):
    md = dcp.FileSystemReader(ckpt).read_metadata()
    mcore = getattr(md, "mcore_data", None) or {}
    state, rows = {}, {}
    for fqn, meta in md.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            state[fqn], start, n = _target(meta.size, meta.properties.dtype, rank, world)
            rows[fqn] = (start, n, meta)
        else:
            state[fqn] = "not loaded"  # a bytes item: DCP replaces it with torch.load of the item
    load_state(state, ckpt)
    bad = []
    for fqn, (start, n, meta) in rows.items():
        element = torch.tensor([], dtype=meta.properties.dtype).element_size()
        with open(os.path.join(dumps, fqn + ".bin"), "rb") as f:
            expected = f.read()
        if fqn in mcore:
            expected = reformulate(expected, mcore[fqn]["nd_reformulated_orig_global_shape"], list(meta.size), element)
        row_bytes = element
        for s in list(meta.size)[1:]:
            row_bytes *= s
        want = expected[start * row_bytes:(start + n) * row_bytes] if meta.size else expected
        if raw(_local(state[fqn])) != want:
            bad.append(fqn)
    for fqn, value in state.items():
        if fqn not in rows and not (isinstance(value, list) and len(value) == 1):
            bad.append(f"{fqn} (object: {value!r:.80})")  # Megatron's [data] per unique key
    print(f"[torch {torch.__version__} rank {rank}] loaded {len(rows)} tensors, "
          f"{len(state) - len(rows)} objects: {'OK' if not bad else 'MISMATCH ' + str(bad)}", flush=True)
    return not bad


# ----------------------------------------------------------------- torch writes, distckpt reads
COMMON = {"step": 7, "meta": {"lr": 0.5, "name": "peer", "list": [1, 2, 3]}}


def _globals():
    t = {"uneven": make((5, 4), "f32"), "cols": make((3, 5), "bf16"), "rows_i64": make((3, 3), "i64"),
         "scalar": torch.tensor(2.5), "no_elements": make((0, 4), "f32")}
    if TORCH2:
        t["empty_shard"] = make((2, 3), "i64")
    t["transposed"] = make((3, 4), "f32").t()  # saved with strides (1, 4)
    t["bf16_3d"] = make((3, 7, 5), "bf16")
    t["view"] = make((6, 8), "i64")[1:4, 2:7]  # a view: storage offset 10, strides (8, 1)
    return t


def _save_worker(rank, world, ckpt):
    g = _globals()
    if TORCH2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (world,))
        state = {"uneven": distribute_tensor(g["uneven"], mesh, [Shard(0)]),        # rows 2, 2, 1
                 "empty_shard": distribute_tensor(g["empty_shard"], mesh, [Shard(0)]),  # rows 1, 1, 0
                 "cols": distribute_tensor(g["cols"], mesh, [Shard(1)]),            # columns 2, 2, 1
                 "rows_i64": distribute_tensor(g["rows_i64"], mesh, [Shard(0)]),
                 "bf16_3d": distribute_tensor(g["bf16_3d"], mesh, [Shard(1)]),     # columns 3, 3, 1
                 "no_elements": distribute_tensor(g["no_elements"], mesh, [Shard(1)])}  # (0, 2) x 2, (0, 0)
    else:
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards

        def sharded(t, dim, cuts):
            start, n = cuts[rank]
            local = t.narrow(dim, start, n).clone()
            offsets = [0] * t.dim()
            offsets[dim] = start
            return init_from_local_shards([Shard.from_tensor_and_offsets(local, offsets, rank)], *t.shape)

        state = {"uneven": sharded(g["uneven"], 0, [(0, 3), (3, 2)]),
                 "cols": sharded(g["cols"], 1, [(0, 2), (2, 3)]),
                 "rows_i64": sharded(g["rows_i64"], 0, [(0, 2), (2, 1)]),
                 "bf16_3d": sharded(g["bf16_3d"], 1, [(0, 4), (4, 3)]),
                 "no_elements": g["no_elements"]}
    state.update(scalar=g["scalar"], transposed=g["transposed"], view=g["view"],
                 **json.loads(json.dumps(COMMON)))
    save_state(state, ckpt)


def save(ckpt, expected):
    run_ranks(3 if TORCH2 else 2, _save_worker, ckpt)
    os.makedirs(expected, exist_ok=True)
    for key, t in _globals().items():
        with open(os.path.join(expected, key + ".bin"), "wb") as f:
            f.write(raw(t))
    with open(os.path.join(expected, "common.json"), "w") as f:
        json.dump(COMMON, f)
    print("\n".join(_globals()))


def main(argv):
    cmd = argv[1]
    if cmd == "keys":
        with open(argv[2]) as f:
            print("\n".join(json.load(f)["tensors"]))
    elif cmd == "load":
        import_torch()
        run_ranks(2, _load_worker, argv[2], argv[3])
    elif cmd == "save":
        import_torch()
        save(argv[2], argv[3])
    elif cmd == "check-common":
        with open(argv[2]) as f:
            got = json.load(f)["common"]
        with open(argv[3]) as f:
            want = json.load(f)
        if got != want:
            print(f"common state differs: distckpt read {got}, torch wrote {want}")
            return 1
        print(f"common state matches: {got}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    try:
        rc = main(sys.argv)
    except SystemExit as e:
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: B902
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # skips torch's slow interpreter teardown (see _rank_main)
