#!/usr/bin/env bash
# Read amplification of resharded loads: the gpt-tiny matrix (`run --matrix`,
# native and DCP, DCP under --backend mpi too; at most 1.05), then for the real-run fixtures: for each
# checkpoint root Megatron's own training loop wrote (fixtures/megatron-runs)
# and each verl Megatron run (fixtures/verl-runs/megatron-*), `distckpt
# reshard --spec gpt` under every topology of a list that `verify` says
# loads, as written (torch_dist, torch's files) and resaved by distckpt
# (--format dcp, with its item index; verl's also --format native). Prints
# read/needed per load and over each matrix; fails when a load reads more
# than BOUND_LOAD times, or a matrix more than BOUND_MATRIX times, the bytes
# it needs (every read still verified: the default VerifyPolicy). Bounds, a
# little above what they read on 2026-11-28: distckpt's files 1.05 over a
# matrix (1.004 to 1.007 for Megatron's roots; verl's Qwen2 of hidden 16
# 1.02 as DCP, 1.000 native, since flat optimizer states are tiled along
# their rows: 1.06 and 1.07 before), 1.15 a load;
# torch's files (one CRC32 per record and a zip around each: a partly needed
# record is read whole to check it, a small item whole with its headers)
# 2.30 over a matrix and 4.10 a load (each rank needing a quarter of every
# record reads 4 times what it needs). Then each root's checkpoint after
# `distckpt index` (its sidecar item indexes, in a directory of this run):
# 1.05 over a matrix and 1.15 a load, like distckpt's own files, threads and
# (where mpirun is installed) --backend mpi.
#   reshard_read_bytes_test.sh DISTCKPT FIXTURES_DIR
set -euo pipefail
d=$1 fixtures=$2
work=$(mktemp -d /tmp/distckpt-rbytes-XXXXXX)
trap 'rm -rf "$work"' EXIT
# No sidecar from the user's cache: torch's files as written, unless a matrix says.
export DISTCKPT_INDEX_DIR=$work/no-index
fail() { echo "FAIL: $*"; exit 1; }
topologies="tp=1 tp=2 tp=4 pp=2 tp=2,pp=2 tp=4,pp=2 dp=2 tp=2,dp=2 ep=2,dp=2 tp=2,ep=2,dp=2 ep=4,dp=4"
# check_ratio NAME READ NEEDED BOUND
check_ratio() {
  python3 -c 'import sys; r, n, b = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sys.exit(0 if n > 0 and r <= b * n else 1)' "$2" "$3" "$4" ||
    fail "$1: read $2 bytes for $3 needed (bound $4 x)"
}
# matrix NAME CHECKPOINT BOUND_MATRIX BOUND_LOAD: every topology that loads, resharded;
# the first that loads in $first.
matrix() {
  local name=$1 ck=$2 bound_matrix=$3 bound_load=$4 sum_read=0 sum_needed=0 loads=0 t line read needed
  first=
  for t in $topologies; do
    "$d" verify "$ck" --spec gpt -t "$t" > "$work/v" 2>&1 || continue
    grep -q "under $t: loads" "$work/v" || continue
    [ -n "$first" ] || first=$t
    rm -rf "$work/out"
    "$d" reshard "$ck" --spec gpt -t "$t" --out "$work/out" ${backend:+--backend $backend} \
      > "$work/r" 2>&1 ||
      { cat "$work/r"; fail "$name: reshard under $t"; }
    line=$(grep -E "^resharded .* bytes read of [0-9]+ needed" "$work/r") ||
      { cat "$work/r"; fail "$name: no read/needed under $t"; }
    read=$(sed -nE 's/.*: ([0-9]+) bytes read of ([0-9]+) needed.*/\1/p' <<<"$line")
    needed=$(sed -nE 's/.*: ([0-9]+) bytes read of ([0-9]+) needed.*/\2/p' <<<"$line")
    echo "  $name under $t: $read / $needed"
    check_ratio "$name under $t" "$read" "$needed" "$bound_load"
    sum_read=$((sum_read + read)) sum_needed=$((sum_needed + needed)) loads=$((loads + 1))
  done
  [ $loads -gt 1 ] || fail "$name: fewer than two topologies load"
  echo "$name: $loads loads, $sum_read / $sum_needed ($(python3 -c \
    "print('%.3f' % ($sum_read / $sum_needed))"))"
  check_ratio "$name matrix" "$sum_read" "$sum_needed" "$bound_matrix"
}
# The embedded gpt-tiny scenario's matrix (every save x load pair), native and DCP: 1.05;
# DCP again with each rank a process (--backend mpi, where mpirun is installed), whose ranks
# share each file's item index through the load's communicator (read once between them).
gpt_tiny() {
  local format=$1 name=$1
  shift
  [ $# -eq 0 ] || name="$format $*"
  "$d" run --matrix --format $format "$@" > "$work/m" 2>&1 || { tail "$work/m"; fail "run --matrix --format $name"; }
  line=$(grep "bytes read / needed over all loads" "$work/m") || fail "run --matrix: no total"
  echo "gpt-tiny matrix, $name: ${line#*: }"
  check_ratio "gpt-tiny matrix ($name)" "$(sed -nE 's/.*: ([0-9]+) \/ ([0-9]+) .*/\1/p' <<<"$line")" \
    "$(sed -nE 's/.*: ([0-9]+) \/ ([0-9]+) .*/\2/p' <<<"$line")" 1.05
}
gpt_tiny native
gpt_tiny dcp
if command -v mpirun >/dev/null; then gpt_tiny dcp --backend mpi; fi
# flat_flip NAME CHECKPOINT MESSAGE: flips a byte of row 8, column 1 of the first layer's
# exp_avg of linear_fc2.weight (a flat chunk), which the first tp=2 rank reads (columns
# [0, 12) of 24); the reshard under tp=2 is refused (exit 2) with MESSAGE naming the file
# and key, and writes nothing. Restores the byte.
flat_flip() {
  local name=$1 ck=$2 message=$3 key=optimizer.state.exp_avg.decoder.layers.mlp.linear_fc2.weight
  local file at path rc
  read -r file at < <("$d" inspect "$ck" --json 2>/dev/null | python3 -c '
import json, sys
key = sys.argv[1]
t = json.load(sys.stdin)["tensors"][key]
c = next(c for c in t["chunks"] if "flat" in c and c["offset"][0] == 0)
columns = c["shape"][-1]
element = 8 * columns + 1 - c["flat"][0]
assert 0 <= element < c["flat"][1] - c["flat"][0], c
# native: byte_offset is the payload; dcp: the item, whose record starts after its headers
print(c["file"], c["byte_offset"], element * 4 + 1)' "$key")
  path=$(find "$ck" -name "$file" | head -1)
  local offset=${at% *} within=${at#* }
  if [ "$message" = "CRC32 mismatch" ]; then
    # The item is a zip (stored records): its data/0 record's first byte.
    offset=$(python3 -c 'import struct, sys
f = open(sys.argv[1], "rb"); at = int(sys.argv[2])
while True:
    f.seek(at); h = f.read(30)
    assert h[:4] == b"PK\x03\x04", at
    size, n, e = struct.unpack("<I", h[18:22])[0], *struct.unpack("<HH", h[26:30])
    if f.read(n).endswith(b"data/0"): break
    at += 30 + n + e + size
print(at + 30 + n + e)' "$path" "$offset")
  fi
  python3 -c 'import sys; f, at = sys.argv[1], int(sys.argv[2]); b = bytearray(open(f, "rb").read())
b[at] ^= 1; open(f, "wb").write(b)' "$path" $((offset + within))
  rm -rf "$work/out"
  set +e
  "$d" reshard "$ck" --spec gpt -t tp=2 --out "$work/out" > "$work/r" 2>&1
  rc=$?
  set -e
  python3 -c 'import sys; f, at = sys.argv[1], int(sys.argv[2]); b = bytearray(open(f, "rb").read())
b[at] ^= 1; open(f, "wb").write(b)' "$path" $((offset + within))
  [ $rc = 2 ] || { cat "$work/r"; fail "$name: a flipped byte in a flat tile: exit $rc, not 2"; }
  grep -q "$message in $path for key '$key'" "$work/r" ||
    { cat "$work/r"; fail "$name: the refusal does not name the file and key"; }
  [ ! -e "$work/out" ] || fail "$name: a refused reshard wrote $work/out"
  echo "  $name: a flipped byte in a partly read flat tile refused, naming $file and $key"
}
roots=0
for root in "$fixtures"/megatron-runs/*/ "$fixtures"/verl-runs/megatron-*/; do
  root=${root%/}
  [ -f "$root/latest_checkpointed_iteration.txt" ] || continue
  name=$(basename "$root")
  ck=$root
  # verl's Megatron run: the step's actor checkpoint.
  [ -d "$root/global_step_2/actor" ] && ck=$root/global_step_2/actor
  # distopt-dp2 (dp_reshardable optimizer buckets): not a --spec gpt request.
  "$d" verify "$ck" --spec gpt -t tp=1 > "$work/v" 2>&1 || true
  grep -q "WOULD NOT LOAD\|loads" "$work/v" || continue
  matrix "$name (as written)" "$ck" ${WRITTEN_BOUNDS:-2.30 4.10}
  # After `distckpt index` (once): torch's files with sidecar item indexes.
  rm -rf "$work/index"
  "$d" index "$ck" --into "$work/index" > "$work/i" 2>&1 || { cat "$work/i"; fail "$name: index"; }
  grep -E "^indexed " "$work/i"
  for backend in threads $(command -v mpirun >/dev/null && echo mpi); do
    DISTCKPT_INDEX_DIR=$work/index matrix "$name (indexed, $backend)" "$ck" 1.05 1.15
  done
  backend=
  # The same state resaved by distckpt (--format dcp: its item index) under the first
  # topology that loads, and its matrix.
  rm -rf "$work/resaved"
  "$d" reshard "$ck" --spec gpt -t "$first" --format dcp --out "$work/resaved" > "$work/r" 2>&1 ||
    { cat "$work/r"; fail "$name: resave under $first"; }
  matrix "$name (resaved by distckpt under $first)" "$work/resaved" 1.05 1.15
  # verl's roots resaved as native too (its dist_ckpt/); a flipped byte in a tile of a
  # row-parallel weight's Adam state (a flat chunk, tiled along its rows) that a tp=2 rank
  # reads part of is refused naming the file and key, in both formats.
  if [ "$first" = tp=1 ] && [ -d "$work/resaved/dist_ckpt" ]; then
    rm -rf "$work/native"
    "$d" reshard "$ck" --spec gpt -t "$first" --format native --out "$work/native" > "$work/r" 2>&1 ||
      { cat "$work/r"; fail "$name: resave as native under $first"; }
    matrix "$name (resaved by distckpt as native under $first)" "$work/native/dist_ckpt" 1.05 1.15
    flat_flip "$name (native)" "$work/native/dist_ckpt" "checksum mismatch"
    flat_flip "$name (dcp)" "$work/resaved/dist_ckpt" "CRC32 mismatch"
  fi
  # Every byte read is still checked: a flipped byte in the middle of the word embeddings,
  # which each rank under tp=2 reads in part (the tiles of its rows), is refused (exit 2)
  # naming the file and the key, and nothing is written.
  if [ "$first" = tp=1 ] && "$d" verify "$work/resaved" --spec gpt -t tp=2 2>&1 |
    grep -q "under tp=2: loads"; then
    read -r file at < <("$d" inspect "$work/resaved" --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin)["tensors"]["embedding.word_embeddings.weight"]["chunks"][0]
print(c["file"], c["byte_offset"] + 400 + c["length"] // 2)')
    # Under a tracker's iter_N/ (Megatron) or dist_ckpt/ (verl).
    dir=$(dirname "$(find "$work/resaved" -name "$file" | head -1)")
    python3 -c 'import sys; f, at = sys.argv[1], int(sys.argv[2]); b = bytearray(open(f, "rb").read())
b[at] ^= 1; open(f, "wb").write(b)' "$dir/$file" "$at"
    # The same under --backend mpi (a process a rank, sharing the item index), where installed.
    backends=threads
    if command -v mpirun >/dev/null; then backends="threads mpi"; fi
    for backend in $backends; do
      rm -rf "$work/out"
      set +e
      "$d" reshard "$work/resaved" --spec gpt -t tp=2 --backend $backend --out "$work/out" > "$work/r" 2>&1
      rc=$?
      set -e
      [ $rc = 2 ] || { cat "$work/r"; fail "$name: a flipped byte ($backend): exit $rc, not 2"; }
      grep -q "CRC32 mismatch in $dir/$file for key 'embedding.word_embeddings.weight'" "$work/r" ||
        { cat "$work/r"; fail "$name: the refusal ($backend) does not name the file and key"; }
      [ ! -e "$work/out" ] || fail "$name: a refused reshard ($backend) wrote $work/out"
      echo "  $name: a flipped byte in a partly read tile refused ($backend), naming $file and the key"
    done
  fi
  roots=$((roots + 1))
done
[ $roots -gt 0 ] || fail "no fixture roots under $fixtures"
echo "reshard_read_bytes_test: $roots roots"
