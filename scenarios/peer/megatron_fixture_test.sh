#!/usr/bin/env bash
# Checkpoints written by Megatron-Core itself (fixtures/megatron/, ctest label `scenario`):
#   megatron_fixture_test.sh DISTCKPT [FIXTURES_DIR]
# On every committed fixture: inspect (and --check), diff with itself, dump of every
# tensor equal to the expected global tensor, verify --spec under TP/PP changes Megatron
# accepts (exit 0) and refuses (exit 1, naming key and dimension), --spec gpt inference.
# Then reshard gpt-tp2-pp2 to tp=1,pp=2 (threads, and MPI when mpirun is there) and diff
# it with gpt-tp2-pp2-resaved-tp1pp2 (what Megatron's own load + save under tp=1,pp=2
# wrote); cross-layout diffs; DP-only reshards keep rng_state and the common state byte for
# byte (`dump` of each object), and, with the torch 2 chroot (DISTCKPT_TORCH2_PYTHON, or
# /opt/distckpt-torch2 as root), torch.load gives the same Python values, tuples included;
# a flipped data byte must be refused (exit 2) naming the file.
# Needs python3 (standard library) and sha256sum. Prints every failing command with its output, then
# "N/M checks passed"; exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1
dir=${2:-$(cd "$(dirname "$0")/../../fixtures/megatron" && pwd)}
spec=$dir/gpt-spec.json
fixtures=(gpt-tp2-pp2 gpt-tp2-dp2-fullyparallel gpt-tp1-pp1 gpt-tp2-pp2-resaved-tp1pp2)
resaved=$dir/gpt-tp2-pp2-resaved-tp1pp2
command -v python3 >/dev/null || { echo "megatron_fixture_test: needs python3"; exit 1; }
make_work megatron
start=$(date +%s)
pass=0 total=0
failed=()

# expect RC NAME [--grep ERE]... [--no-grep ERE]... -- CMD...
# Runs CMD; passes when it exits RC and its output (stdout + stderr) matches every
# --grep and no --no-grep. A failure prints the command and its output.
expect() {
  local want=$1 name=$2
  shift 2
  local greps=() nogreps=()
  while [ "$1" != -- ]; do
    case $1 in
      --grep) greps+=("$2"); shift 2 ;;
      --no-grep) nogreps+=("$2"); shift 2 ;;
      *) echo "expect: bad option $1"; exit 2 ;;
    esac
  done
  shift
  total=$((total + 1))
  local out=$work/out.$total why="" rc g
  "$@" >"$out" 2>&1 </dev/null
  rc=$?
  [ "$rc" -eq "$want" ] || why="exit $rc, expected $want"
  for g in "${greps[@]}"; do
    grep -qE -- "$g" "$out" || why="${why:+$why; }output lacks /$g/"
  done
  for g in "${nogreps[@]}"; do
    if grep -qE -- "$g" "$out"; then why="${why:+$why; }output has /$g/"; fi
  done
  if [ -z "$why" ]; then
    pass=$((pass + 1))
    echo "ok   $name"
  else
    failed+=("$name")
    echo "FAIL $name: $why"
    echo "  \$ $*"
    sed -e 's/^/  | /' "$out" | head -40
  fi
}

# dump_equal CKPT KEY FILE SHA256: `distckpt dump` of KEY equals the expected bytes.
dump_equal() {
  local got=$work/dump.bin
  rm -f "$got"
  "$exe" dump "$1" "$2" --out "$got" || return 1
  local sum
  sum=$(sha256sum "$got" | cut -d' ' -f1)
  if [ "$sum" != "$4" ]; then
    echo "sha256 of the dump $sum != expected.json's $4"
    return 1
  fi
  cmp "$got" "$3" || return 1
}

for f in "${fixtures[@]}"; do
  ck=$dir/$f
  expect 0 "$f: inspect" --grep "common state: .*args" --grep "iteration" \
    --no-grep "common_state" -- "$exe" inspect "$ck"
  expect 0 "$f: inspect --check" -- "$exe" inspect --check "$ck"
  expect 0 "$f: diff with itself" --grep "^identical" -- "$exe" diff "$ck" "$ck"
  python3 -c '
import json, sys
for t in json.load(open(sys.argv[1]))["tensors"]:
    print(t["key"], t["file"], t["sha256"], sep="\t")
' "$dir/expected/$f/expected.json" >"$work/expected.tsv"
  while IFS=$'\t' read -r key file sum; do
    expect 0 "$f: dump $key" -- dump_equal "$ck" "$key" "$dir/expected/$f/$file" "$sum"
  done <"$work/expected.tsv"
  expect 0 "$f: verify --data (every stored byte, torch's record CRCs)" \
    --grep "every checksum matches" \
    -- "$exe" verify "$ck" --topology tp=1,pp=2 --spec "$spec" --data
  for t in tp=1,pp=2 tp=4 tp=2,pp=2,dp=2; do
    expect 0 "$f: verify --spec gpt-spec.json under $t" --grep "loads" \
      -- "$exe" verify "$ck" --topology "$t" --spec "$spec"
  done
  expect 1 "$f: verify refuses tp=3 naming key and axis" --grep "WOULD NOT LOAD" \
    --grep "tensor '[a-z_.]+' axis [0-9]+ of size [0-9]+ cannot be split evenly into (tp=)?3 parts" \
    -- "$exe" verify "$ck" --topology tp=3 --spec "$spec"
  expect 1 "$f: verify refuses pp=3 (4 layers)" --grep "WOULD NOT LOAD" \
    --grep "stack axis of 4 cannot be split into pp\*vpp=3" \
    -- "$exe" verify "$ck" --topology pp=3 --spec "$spec"
  if [ "$f" = gpt-tp2-dp2-fullyparallel ]; then
    # Its dp_reshardable distributed optimizer (saved under tp=2): Megatron refuses another
    # (TP, PP), and so does --spec gpt, which now infers the optimizer too.
    expect 1 "$f: verify --spec gpt refuses tp=1,pp=2 as Megatron does" \
      --grep "WOULD NOT LOAD: .*\\(TP, PP\\) mismatch" \
      -- "$exe" verify "$ck" --topology tp=1,pp=2 --spec gpt --set heads=4
    expect 0 "$f: verify --spec gpt --set heads=4 under tp=2,dp=1" --grep "spec gpt inferred" \
      -- "$exe" verify "$ck" --topology tp=2 --spec gpt --set heads=4
  else
    expect 0 "$f: verify --spec gpt --set heads=4 under tp=1,pp=2" --grep "spec gpt inferred" \
      -- "$exe" verify "$ck" --topology tp=1,pp=2 --spec gpt --set heads=4
  fi
done

# Cross-layout: the same global tensors whatever Megatron's layout. rng_state is per (pp, tp)
# (not comparable across layouts) and the resave does not carry it; args differ by layout.
expect 0 "diff gpt-tp2-pp2 gpt-tp2-pp2-resaved-tp1pp2 (rng_state left out)" --grep "^identical" \
  -- "$exe" diff "$dir/gpt-tp2-pp2" "$resaved" --exclude rng_state
for f in gpt-tp1-pp1 gpt-tp2-dp2-fullyparallel; do
  expect 0 "diff gpt-tp2-pp2 $f (model tensors)" --grep "^identical" \
    -- "$exe" diff "$dir/gpt-tp2-pp2" "$dir/$f" --exclude rng_state --exclude common \
    --exclude 'optimizer.*'
done

# distckpt reshard to tp=1,pp=2 must write what Megatron's load + save wrote.
expect 0 "reshard gpt-tp2-pp2 to tp=1,pp=2 (threads)" -- "$exe" reshard "$dir/gpt-tp2-pp2" \
  --topology tp=1,pp=2 --spec "$spec" --format dcp --out "$work/reshard-threads"
expect 0 "reshard (threads) diff gpt-tp2-pp2-resaved-tp1pp2" --grep "^identical" \
  -- "$exe" diff "$work/reshard-threads" "$resaved"
# `diff` compares the common state as JSON, where a Namespace and a dict look alike: the
# pickled class must be in the files (Megatron's resume reads args.<field>).
expect 0 "reshard (threads) keeps args an argparse.Namespace" \
  -- grep -l -a -F argparse -r "$work/reshard-threads"
expect 0 "reshard (threads) loads back under tp=2,pp=2" --grep "loads" \
  -- "$exe" verify "$work/reshard-threads" --topology tp=2,pp=2 --spec "$spec" --data
if command -v mpirun >/dev/null && "$exe" reshard --help 2>&1 | grep -q -- --backend; then
  mpi=(mpirun -np 2)
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    mpi+=(--oversubscribe)
    [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  fi
  expect 0 "reshard gpt-tp2-pp2 to tp=1,pp=2 (mpi, 2 processes)" -- "${mpi[@]}" "$exe" reshard \
    "$dir/gpt-tp2-pp2" --topology tp=1,pp=2 --spec "$spec" --format dcp --backend mpi \
    --out "$work/reshard-mpi"
  expect 0 "reshard (mpi) diff gpt-tp2-pp2-resaved-tp1pp2" --grep "^identical" \
    -- "$exe" diff "$work/reshard-mpi" "$resaved"
else
  echo "skip reshard --backend mpi (no mpirun, or no --backend)"
fi
expect 0 "reshard gpt-tp2-dp2-fullyparallel to tp=1,pp=2" -- "$exe" reshard \
  "$dir/gpt-tp2-dp2-fullyparallel" --topology tp=1,pp=2 --spec "$spec" --format dcp \
  --out "$work/reshard-fp"
expect 0 "reshard of gpt-tp2-dp2-fullyparallel diff the resave (tensors)" --grep "^identical" \
  -- "$exe" diff "$work/reshard-fp" "$resaved" --exclude common --exclude 'optimizer.*'

# DP-only reshards (TP and PP kept) keep rng_state, whose Python values (random.getstate()'s
# tuples, numpy's ndarray, a tensor) our JSON cannot hold: it and the common state must be
# written as stored, not pickled again from JSON.
# same_object A B KEY: `distckpt dump` of object KEY is the same bytes in A and B.
same_object() {
  "$exe" dump "$1" "$3" --out "$work/a.obj" >/dev/null || return 1
  "$exe" dump "$2" "$3" --out "$work/b.obj" >/dev/null || return 1
  cmp "$work/a.obj" "$work/b.obj"
}
torch2=${DISTCKPT_TORCH2_PYTHON:-}
root=/opt/distckpt-torch2
if [ -z "$torch2" ] && [ "$(id -u)" -eq 0 ] && [ -x "$root/usr/bin/python3" ] &&
   mountpoint -q "$root/tmp"; then
  torch2="chroot $root env USE_LIBUV=0 OMP_NUM_THREADS=1 python3"
fi
# torch.load of every object item of A (rng_state, common_state) equals B's, types included.
cat >"$work/same_objects.py" <<'PY'
import argparse, io, sys
import numpy as np
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

def objects(d):
    md = FileSystemReader(d).read_metadata()
    out = {}
    for index, info in md.storage_data.items():
        if isinstance(md.state_dict_metadata[index.fqn], BytesStorageMetadata):
            with open(f"{d}/{info.relative_path}", "rb") as f:
                f.seek(info.offset)
                out[index.fqn] = torch.load(io.BytesIO(f.read(info.length)), weights_only=False)
    return out

def same(a, b, at):
    assert type(a) is type(b), f"{at}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{at}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{at}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{at}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{at}[{k!r}]")
    elif isinstance(a, argparse.Namespace):
        same(vars(a), vars(b), at)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), at
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), at
    else:
        assert a == b, f"{at}: {a!r} != {b!r}"

a, b = objects(sys.argv[1]), objects(sys.argv[2])
keys = sorted(k for k in a if k.startswith(("rng_state/", "common_state/")))
assert any(k.startswith("rng_state/") for k in keys), sorted(a)
for k in keys:
    same(a[k], b[k], k)
    if k.startswith("rng_state/"):
        rng = b[k][0][0]
        assert isinstance(rng["random_rng_state"], tuple), type(rng["random_rng_state"])
        assert isinstance(rng["np_rng_state"][1], np.ndarray), type(rng["np_rng_state"][1])
print(f"torch.load: {', '.join(keys)} equal, Python types kept")
PY
for pair in "gpt-tp2-dp2-fullyparallel tp=2" "gpt-tp2-pp2 tp=2,pp=2,dp=2"; do
  read -r f t <<<"$pair"
  out=$work/reshard-dp-$f
  expect 0 "reshard $f to $t (DP only)" -- "$exe" reshard "$dir/$f" --topology "$t" \
    --spec "$spec" --format dcp --out "$out"
  objects=$("$exe" inspect "$dir/$f" | grep -oE '^ *rng_state/shard_[0-9._]+' | tr -d ' ')
  for key in $objects common_state/shard_0_1; do
    expect 0 "reshard $f to $t stores $key as stored" -- same_object "$dir/$f" "$out" "$key"
  done
  if [ -n "$torch2" ]; then
    cp -r "$dir/$f" "$work/orig-$f"  # the chroot sees /tmp only
    expect 0 "reshard $f to $t: torch.load of rng_state and common state unchanged" \
      --grep "Python types kept" -- $torch2 "$work/same_objects.py" "$work/orig-$f" "$out"
  else
    echo "skip torch.load of $f's resharded objects (no torch 2 chroot)"
  fi
done

# Damage: flip one byte inside the tensor data of a copy (the record holding tp rank 0's
# embedding rows, found by its bytes): refused with exit 2 naming the file.
cp -r "$dir/gpt-tp2-pp2" "$work/damaged"
emb=$dir/expected/gpt-tp2-pp2/embedding.word_embeddings.weight.bin
half=$(($(stat -c %s "$emb") / 2))
hit=""
for data in "$work"/damaged/*.distcp; do
  at=$(python3 - "$data" "$emb" "$half" <<'PY'
import sys
blob = open(sys.argv[1], "rb").read()
rows = open(sys.argv[2], "rb").read()[: int(sys.argv[3])]
i = blob.find(rows)
print(-1 if i < 0 else i + len(rows) // 2)
PY
)
  if [ "$at" -ge 0 ]; then
    python3 - "$data" "$at" <<'PY'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x01]))
PY
    hit=$(basename "$data")
    break
  fi
done
if [ -z "$hit" ]; then
  total=$((total + 1))
  failed+=("damage: embedding rows not found in any .distcp")
  echo "FAIL damage: tp rank 0's embedding rows not found in any .distcp of gpt-tp2-pp2"
else
  echo "flipped one byte of $hit at the middle of tp rank 0's embedding rows"
  expect 2 "damaged $hit: verify --data refuses naming the file" --grep "$hit" \
    -- "$exe" verify "$work/damaged" --topology tp=2,pp=2 --spec "$spec" --data
  expect 2 "damaged $hit: dump refuses naming the file" --grep "$hit" \
    -- "$exe" dump "$work/damaged" embedding.word_embeddings.weight --out "$work/d.bin"
fi

echo "$pass/$total checks passed ($(($(date +%s) - start)) s)"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}"
  exit 1
fi
