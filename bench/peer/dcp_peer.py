#!/usr/bin/env python3
"""PyTorch DCP peer for bench/: saves and loads, with torch's own DCP, the
same states checkpoint_bench uses (COUNT float32 tensors of BYTES bytes, one
process), times save / cold load / warm load (median of --reps), and prints
them next to distckpt's figures from a checkpoint_bench JSON file, as ratios
distckpt / DCP (below 1 = distckpt faster): distckpt's native format
(BM_Save, BM_LoadCold, BM_LoadWarm) and distckpt writing and reading the DCP
format itself (BM_DcpSave, BM_DcpLoadWarm: the same files torch reads).

  dcp_peer.py --distckpt-json bench.json [--sizes 65536x256,1048576x64] [--dir D] [--reps 3]

Exits 0 with a clear message when torch is not importable (no peer installed).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings


def allow_unhashable_dataclass_defaults():
    """torch 1.13 on Python 3.11: the shared shim scenarios/peer/dataclass_shim.py,
    imported from beside this file (where bench/peer/run copies it) or from the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.join(here, "..", "..", "reference", "format", "dcp", "peer")]
    from dataclass_shim import allow_unhashable_dataclass_defaults as shim
    shim()


def import_dcp():
    allow_unhashable_dataclass_defaults()
    # torch 2.x warns that a save without a process group runs in one process.
    warnings.filterwarnings("ignore", category=UserWarning)
    import torch  # noqa: F401
    try:
        import torch.distributed.checkpoint as dcp
        return torch, dcp, hasattr(dcp, "save")
    except ImportError:
        import torch.distributed._shard.checkpoint as dcp
        return torch, dcp, False


def evict(path):
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def time_dcp(torch, dcp, new_api, nbytes, count, workdir, reps):
    state = {f"t{i}": torch.arange(nbytes // 4, dtype=torch.float32) + i for i in range(count)}
    dest = {k: torch.empty_like(v) for k, v in state.items()}
    ckpt = os.path.join(workdir, "ckpt")
    times = {"save": [], "load_cold": [], "load_warm": []}
    for _ in range(reps):
        shutil.rmtree(ckpt, ignore_errors=True)
        start = time.perf_counter()
        writer = dcp.FileSystemWriter(ckpt)
        if new_api:  # torch 2.x: no process group means one process (no_dist)
            dcp.save(state, storage_writer=writer)
        else:
            dcp.save_state_dict(state, writer, no_dist=True)
        times["save"].append(time.perf_counter() - start)
        for mode in ("load_cold", "load_warm"):
            if mode == "load_cold":
                evict(ckpt)
            start = time.perf_counter()
            reader = dcp.FileSystemReader(ckpt)
            if new_api:
                dcp.load(dest, storage_reader=reader)
            else:
                dcp.load_state_dict(dest, reader, no_dist=True)
            times[mode].append(time.perf_counter() - start)
        assert all(torch.equal(dest[k], state[k]) for k in state), "DCP round trip differs"
    shutil.rmtree(ckpt, ignore_errors=True)
    return {k: statistics.median(v) for k, v in times.items()}


def distckpt_times(path):
    """checkpoint_bench JSON -> {(bytes, count): {save, load_cold, load_warm}} in seconds."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    names = {"BM_Save": "save", "BM_LoadCold": "load_cold", "BM_LoadWarm": "load_warm",
             "BM_DcpSave": "dcp_save", "BM_DcpLoadWarm": "dcp_load_warm"}
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue  # other aggregates; a cold benchmark skipped where eviction is impossible
        parts = b["run_name"].split("/")
        if parts[0] in names:
            key = (int(parts[1]), int(parts[2]))
            out.setdefault(key, {})[names[parts[0]]] = b["real_time"] * scale[b.get("time_unit", "ns")]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--distckpt-json", required=True)
    ap.add_argument("--sizes", default="65536x256,1048576x64,16777216x16,67108864x4")
    ap.add_argument("--dir", default=os.environ.get("DISTCKPT_BENCH_DIR", tempfile.gettempdir()))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    try:
        torch, dcp, new_api = import_dcp()
    except Exception as e:  # noqa: BLE001 - any import failure means "no peer"
        print(f"dcp_peer: no PyTorch peer ({type(e).__name__}: {e}); install one with ci/setup-peers")
        return 0
    ours = distckpt_times(args.distckpt_json)
    print(f"PyTorch {torch.__version__} DCP vs distckpt (native format, and DCP format), one "
          f"process, median of {args.reps}")
    print(f"{'state':<14} {'op':<10} {'torch s':>9} {'native s':>9} {'native/torch':>13} "
          f"{'dcp s':>9} {'dcp/torch':>10}")
    for size in args.sizes.split(","):
        nbytes, count = (int(x) for x in size.split("x"))
        work = tempfile.mkdtemp(prefix="distckpt-dcp-peer-", dir=args.dir)
        try:
            peer = time_dcp(torch, dcp, new_api, nbytes, count, work, args.reps)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        mine = ours.get((nbytes, count), {})
        for op in ("save", "load_cold", "load_warm"):
            cells = []
            for name, width in ((op, 13), ("dcp_" + op, 10)):
                if name in mine:
                    cells.append(f"{mine[name]:>9.4f} {mine[name] / peer[op]:>{width}.3f}")
                else:
                    cells.append(f"{'-':>9} {'-':>{width}}")
            print(f"{size:<14} {op:<10} {peer[op]:>9.4f} {cells[0]} {cells[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
