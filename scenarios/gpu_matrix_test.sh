#!/bin/bash
# The scenario suites on CUDA ranks (ctest gpu_matrix, label gpu; exit 77 =
# skipped without a device). With DISTCKPT_SIMULATE_CUDA set (ctest
# gpu_matrix_simulated) the same runs use simulated devices, NCCL left out.
#
#   scenarios/gpu_matrix_test.sh DISTCKPT SCENARIO_DIR
#
# 1. gpt-tiny, every ordered pair of its 16 topologies, ranks as threads
#    with their tensors on the device: every pair ok.
# 2. gpt-tiny-dp under Open MPI, fully parallel saves and loads: the load
#    exchange over MPI (device bytes staged through host memory), then over
#    NCCL (device memory in place); both every pair ok, each loaded element
#    checked, and the two reports agree pair by pair on bytes read.
set -euo pipefail
distckpt=$1
scenarios=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

devices=$("$distckpt" devices)
echo "$devices"
if [[ $devices == 0\ * ]]; then
  echo "SKIPPED: no CUDA device"
  exit 77
fi

expect_all_ok() {  # report.json label
  python3 - "$1" "$2" <<'PY'
import json, sys
pairs = json.load(open(sys.argv[1]))["pairs"]
bad = [p for p in pairs if p["verdict"] != "ok"]
print(f"{sys.argv[2]}: {len(pairs) - len(bad)}/{len(pairs)} pairs ok")
for p in bad[:5]:
    print(f"  {p['save']} -> {p['load']}: {p['reason']}")
sys.exit(1 if bad or not pairs else 0)
PY
}

"$distckpt" run "$scenarios/gpt-tiny.json" --matrix --device cuda --work-dir "$work/threads" \
  --report "$work/threads.json" >/dev/null 2>"$work/threads.log" || { tail -5 "$work/threads.log"; }
expect_all_ok "$work/threads.json" "gpt-tiny matrix, threads, --device cuda"

if ! command -v mpirun >/dev/null; then
  echo "no mpirun: MPI and NCCL runs left out"
  exit 0
fi
mpi_run() {  # label, extra flags...
  local label=$1
  shift
  "$distckpt" run "$scenarios/gpt-tiny-dp.json" --matrix --backend mpi --device cuda \
    --fully-parallel --work-dir "$work/$label" --report "$work/$label.json" "$@" \
    >/dev/null 2>"$work/$label.log" || tail -5 "$work/$label.log"
  expect_all_ok "$work/$label.json" "gpt-tiny-dp matrix, mpi, fully parallel, exchange $label"
}
mpi_run mpi
if [[ -n ${DISTCKPT_SIMULATE_CUDA:-} ]]; then
  echo "simulated devices: the NCCL run is left out"
  exit 0
fi
mpi_run nccl --comm nccl
python3 - "$work/mpi.json" "$work/nccl.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["pairs"] for p in sys.argv[1:])
key = lambda p: (p["save"], p["load"])
a, b = {key(p): p for p in a}, {key(p): p for p in b}
assert a.keys() == b.keys(), "different pairs"
diff = [k for k in a if a[k]["bytes_read"] != b[k]["bytes_read"]]
print(f"NCCL vs MPI exchange: {len(a)} pairs, bytes read equal in {len(a) - len(diff)}")
sys.exit(1 if diff else 0)
PY
