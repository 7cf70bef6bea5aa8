#!/bin/bash
# ci/gpu-bundle's folder works on its own (ctest gpu_bundle, label scenario):
# packed from BUILD_DIR without building, its gpu-check runs on simulated
# devices in an environment with only /usr/bin:/bin on PATH, and every packed
# program and plugin finds its libraries in the bundle or the base system.
#
#   BUILD_DIR=build scenarios/gpu_bundle_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$source_dir/ci/gpu-bundle" --no-build "$work/kit" >"$work/pack.log"
cat "$work/pack.log"
for p in distckpt device_test gpu_bandwidth; do
  [[ -x $work/kit/bin/$p ]] || { echo "FAIL: $p not packed"; exit 1; }
done
for p in mpirun orted; do
  [[ -x $work/kit/ompi/bin/$p ]] || { echo "FAIL: $p not packed"; exit 1; }
done
missing=$(LD_LIBRARY_PATH=$work/kit/lib ldd "$work"/kit/bin/* "$work"/kit/ompi/bin/* 2>&1 |
  grep "not found" | grep -v libnccl || true)
if [[ -n $missing ]]; then
  echo "FAIL: unresolved libraries: $missing"
  exit 1
fi
env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" DISTCKPT_SIMULATE_CUDA=1 GPU_CHECK_MIB=64 \
  GPU_CHECK_OUT="$work/out" "$work/kit/gpu-check" device_test gpu_bandwidth | tee "$work/run.log"
grep -q "^gpu-check: all passed" "$work/run.log"
grep -q "^device_test: passed" "$work/run.log"
grep -q "^loaded values bit-exact: yes" "$work/run.log"
# A failing check fails the run and is named (a size gpu_bandwidth cannot parse).
if env -i PATH=/usr/bin:/bin DISTCKPT_SIMULATE_CUDA=1 GPU_CHECK_MIB=lots \
  GPU_CHECK_OUT="$work/out2" "$work/kit/gpu-check" gpu_bandwidth >"$work/bad.log" 2>&1; then
  echo "FAIL: a failing check passed"; cat "$work/bad.log"; exit 1
fi
grep -q "^gpu-check: FAILED: gpu_bandwidth" "$work/bad.log"
echo "gpu_bundle: ok"
