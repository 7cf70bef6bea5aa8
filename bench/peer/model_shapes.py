#!/usr/bin/env python3
"""Real-run-shaped checkpoints, distckpt next to PyTorch DCP (bench/peer/model_shapes_run).

  model_shapes.py emit --out DIR --scale K ROOT/.metadata...
      the global tensors (key, dtype, shape) of each Megatron checkpoint's DCP
      metadata (fixtures/megatron-runs/<run>/iter_0000010), every axis of 16 or
      more multiplied by K (hidden, ffn, vocab, qkv; not layers, experts,
      heads), written as DIR/<run>.shapes, a line per tensor:
      "key<TAB>dtype d0 d1 ..." (checkpoint_bench's DISTCKPT_BENCH_SHAPES; Megatron's
      distributed-optimizer keys hold spaces). A flat optimizer bucket (1-D) is scaled
      K times like any axis, where the 2-D weights it holds grow K^2 times.
  model_shapes.py time --distckpt-json J [--reps N] DIR/<run>.shapes...
      times torch's dcp.save / dcp.load (cold: evicted; warm) of the same
      tensors, one process, median of N, and prints them next to distckpt's
      BM_ModelSave / BM_ModelLoadCold / BM_ModelLoadWarm medians from J.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_peer import evict  # noqa: E402 (beside this file: model_shapes_run copies both)


def emit(args):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    os.makedirs(args.out, exist_ok=True)
    for meta in args.metadata:
        root = os.path.dirname(os.path.abspath(meta))
        # <run>/iter_0000010/.metadata -> <run>
        run = os.path.basename(os.path.dirname(root)) if os.path.basename(root).startswith("iter_") \
            else os.path.basename(root)
        md = dcp.FileSystemReader(root).read_metadata()
        lines = []
        for key, item in sorted(md.state_dict_metadata.items()):
            if not isinstance(item, TensorStorageMetadata):
                continue  # objects (rng state, args, ...): not tensors
            dtype = str(item.properties.dtype).replace("torch.", "")
            shape = [d * args.scale if d >= 16 else d for d in item.size]
            lines.append(key + "\t" + " ".join([dtype] + [str(d) for d in shape]))
        with open(os.path.join(args.out, run + ".shapes"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


def read_shapes(path):
    import torch
    tensors = []
    for line in open(path):
        if line.strip():
            key, rest = line.rstrip("\n").split("\t")
            fields = rest.split()
            tensors.append((key, getattr(torch, fields[0]), [int(d) for d in fields[1:]]))
    return tensors


def time_torch(path, workdir, reps):
    import torch
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore", category=UserWarning)  # no process group: one process
    shapes = read_shapes(path)
    state = {k: torch.full(s, 1, dtype=dt) for k, dt, s in shapes}
    dest = {k: torch.zeros(s, dtype=dt) for k, dt, s in shapes}
    nbytes = sum(math.prod(s) * torch.empty((), dtype=dt).element_size() for _, dt, s in shapes)
    ckpt = os.path.join(workdir, "ckpt")
    times = {"save": [], "load_cold": [], "load_warm": []}
    for _ in range(reps):
        shutil.rmtree(ckpt, ignore_errors=True)
        start = time.perf_counter()
        dcp.save(state, storage_writer=dcp.FileSystemWriter(ckpt))
        times["save"].append(time.perf_counter() - start)
        for mode in ("load_cold", "load_warm"):
            if mode == "load_cold":
                evict(ckpt)
            start = time.perf_counter()
            dcp.load(dest, storage_reader=dcp.FileSystemReader(ckpt))
            times[mode].append(time.perf_counter() - start)
        assert all(torch.equal(dest[k], state[k]) for k in state), "DCP round trip differs"
    shutil.rmtree(ckpt, ignore_errors=True)
    return len(shapes), nbytes, {k: statistics.median(v) for k, v in times.items()}


def distckpt_times(path):
    """checkpoint_bench JSON -> {run: {op: (seconds, over_raw)}} (medians)."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    ops = {"BM_ModelSave": "save", "BM_ModelLoadCold": "load_cold", "BM_ModelLoadWarm": "load_warm"}
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        parts = b["run_name"].split("/")
        if parts[0] in ops:
            out.setdefault(parts[1], {})[ops[parts[0]]] = (
                b["real_time"] * scale[b.get("time_unit", "ns")], b.get("over_raw", 0.0))
    return out


def time_all(args):
    import torch
    ours = distckpt_times(args.distckpt_json)
    print(f"PyTorch {torch.__version__} DCP (dcp.save / dcp.load, one process) vs distckpt "
          f"(native Save / Load, one rank, verified), median of {args.reps} (torch) and of "
          f"distckpt's repetitions; raw = the same bytes written (write + fdatasync) or read "
          f"(the load's threads) in the same run")
    print(f"{'run':<28} {'tensors':>7} {'MiB':>7} {'op':<10} {'torch s':>8} {'distckpt s':>10} "
          f"{'distckpt/torch':>14} {'distckpt/raw':>12}")
    for path in args.shapes:
        run = os.path.splitext(os.path.basename(path))[0]
        work = tempfile.mkdtemp(prefix="distckpt-model-peer-", dir=args.dir)
        try:
            count, nbytes, peer = time_torch(path, work, args.reps)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        mine = ours.get(run, {})
        for op in ("save", "load_cold", "load_warm"):
            if op in mine:
                s, raw = mine[op]
                cells = f"{s:>10.4f} {s / peer[op]:>14.3f} {raw:>12.3f}"
            else:
                cells = f"{'-':>10} {'-':>14} {'-':>12}"
            print(f"{run:<28} {count:>7} {nbytes / 2**20:>7.1f} {op:<10} {peer[op]:>8.4f} {cells}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("emit")
    e.add_argument("--out", required=True)
    e.add_argument("--scale", type=int, default=16)
    e.add_argument("metadata", nargs="+")
    t = sub.add_parser("time")
    t.add_argument("--distckpt-json", required=True)
    t.add_argument("--reps", type=int, default=3)
    t.add_argument("--dir", default=os.environ.get("DISTCKPT_BENCH_DIR", tempfile.gettempdir()))
    t.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    return emit(args) if args.cmd == "emit" else time_all(args)


if __name__ == "__main__":
    sys.exit(main())
