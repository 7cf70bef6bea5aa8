#!/usr/bin/env bash
# fixtures/megatron-zarr/ against real Megatron-Core (ctest zarr_peer, label `peer`):
#   zarr_peer_test.sh DISTCKPT
# 1. env MEGATRON_015_SRC (a Megatron-LM tree of core_v0.15.3, the last with the zarr
#    backend) and a host python3 with torch and zarr 2 (Debian bookworm's python3-torch,
#    python3-zarr; DISTCKPT_ZARR_PYTHON overrides /usr/bin/python3): make_zarr_fixtures.py
#    writes the fixture again with Megatron's own zarr save, byte for byte equal to the
#    committed one (every file), and Megatron's zarr load of it checked;
# 2. env MEGATRON_SRC (a current Megatron-LM, as for megatron_peer) and the torch 2
#    chroot: Megatron's own dist_checkpointing.load (torch_dist) of `distckpt export --to
#    dcp` of the committed fixture under tp=2, pp=2 holds every tensor, the rng_state
#    objects (random.getstate() still a tuple), args and iteration as the zarr save did.
# Each part runs when its peer is there; skipped (exit 77) when neither is.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures" && pwd)
make_work zarr-peer  # under /tmp: the chroot sees it
ran=0
mkdir -p "$work/megatron-zarr" "$work/megatron"
cp "$fixtures/megatron-zarr/make_zarr_fixtures.py" "$work/megatron-zarr/"
cp "$fixtures/megatron/make_megatron_fixtures.py" "$work/megatron/"

py015=${DISTCKPT_ZARR_PYTHON:-/usr/bin/python3}
src015=${MEGATRON_015_SRC:-}
if [ -n "$src015" ] && [ -f "$src015/megatron/core/dist_checkpointing/strategies/zarr.py" ] &&
   "$py015" -c 'import torch, zarr; assert zarr.__version__.startswith("2")' 2>/dev/null; then
  echo "== Megatron-Core 0.15 writes the zarr fixture again (4 gloo ranks)"
  if ! USE_LIBUV=0 OMP_NUM_THREADS=1 "$py015" "$work/megatron-zarr/make_zarr_fixtures.py" \
      --megatron-src "$src015" --out "$work/out" >"$work/gen.log" 2>&1; then
    cat "$work/gen.log"; echo "FAIL: make_zarr_fixtures.py"; exit 1
  fi
  diff -r "$fixtures/megatron-zarr/gpt-tp2-pp2" "$work/out/gpt-tp2-pp2"
  diff -r "$fixtures/megatron-zarr/expected" "$work/out/expected"
  echo "   regenerated checkpoint and expected/ equal the committed ones, every file"
  ran=1
else
  echo "(part 1 skipped: MEGATRON_015_SRC or a python3 with torch and zarr 2 missing)"
fi

root=/opt/distckpt-torch2
src=${MEGATRON_SRC:-}
if [ -n "$src" ] && [ -f "$src/megatron/core/dist_checkpointing/serialization.py" ] &&
   [ "$(id -u)" -eq 0 ] && [ -x "$root/usr/bin/python3" ] && mountpoint -q "$root/tmp"; then
  echo "== Megatron-Core ($src) loads distckpt's export --to dcp of the zarr fixture"
  mkdir -p "$work/src"
  cp -r "$src/megatron" "$work/src/"
  "$exe" export "$fixtures/megatron-zarr/gpt-tp2-pp2" --to dcp "$work/dcp"
  if ! chroot "$root" env USE_LIBUV=0 OMP_NUM_THREADS=1 python3 \
      "$work/megatron-zarr/make_zarr_fixtures.py" --megatron-src "$work/src" \
      --check-dcp "$work/dcp" >"$work/load.log" 2>&1; then
    cat "$work/load.log"; echo "FAIL: Megatron's load of the export"; exit 1
  fi
  grep "^rank \|^Megatron loads" "$work/load.log"
  ran=1
else
  echo "(part 2 skipped: MEGATRON_SRC or the torch 2 chroot missing)"
fi
if [ $ran -eq 0 ]; then
  echo "SKIPPED: no Megatron peer (MEGATRON_015_SRC with bookworm's python3-zarr; MEGATRON_SRC with the torch 2 chroot)"
  exit 77
fi
echo "zarr peer: ok"
