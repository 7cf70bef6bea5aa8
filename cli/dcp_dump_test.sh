#!/usr/bin/env bash
# `distckpt dump` and `inspect` on DCP (ctest dcp_cli_dump): the tensor row_f32
# (5x4, i*0.5) written by real torch 2.6 and by the stdlib-only raw writer
# dumps to the same bytes, and equals the native format's dump of a DCP save.
#   cli_dump_test.sh DISTCKPT FIXTURES SCENARIO
set -euo pipefail
exe=$1 fixtures=$2 scenario=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$exe" dump "$fixtures/torch-2.6/r2_sharded" row_f32 --out "$work/torch.bin"
"$exe" dump "$fixtures/raw-stdlib/target-2.x" row_f32 --out "$work/raw.bin"
cmp "$work/torch.bin" "$work/raw.bin"
[ "$(stat -c %s "$work/torch.bin")" -eq 80 ]
"$exe" inspect "$fixtures/torch-1.13/r2_sharded" | grep -q "row_bf16 *bf16 *(4, 2) *2 chunks"
# The same scenario saved as native and as DCP dumps identically, key by key.
"$exe" save "$scenario" --topology tp=2,pp=2 --dir "$work/native" >/dev/null
"$exe" save "$scenario" --topology tp=2,pp=2 --dir "$work/dcp" --format dcp >/dev/null
# Async save with 3 writer threads per rank: one __<rank>_<i>.distcp per thread.
"$exe" save "$scenario" --topology tp=2,pp=2 --dir "$work/async" --format dcp --async --writers 3 >/dev/null
[ -f "$work/async/__0_2.distcp" ] && [ -f "$work/async/.metadata" ]
for key in layer.weight embedding.weight optimizer.exp_avg fp8.weight token.counts; do
  "$exe" dump "$work/native" "$key" --out "$work/n.bin" >/dev/null
  "$exe" dump "$work/dcp" "$key" --out "$work/d.bin" >/dev/null
  "$exe" dump "$work/async" "$key" --out "$work/a.bin" >/dev/null
  cmp "$work/n.bin" "$work/d.bin"
  cmp "$work/n.bin" "$work/a.bin"
done
if "$exe" dump "$work/dcp" no.such.key --out "$work/x.bin" 2>"$work/err"; then exit 1; fi
grep -q "holds no tensor 'no.such.key'" "$work/err"
echo "dump and inspect agree across writers and formats"
