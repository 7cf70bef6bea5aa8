#!/usr/bin/env bash
# `distckpt index` on a root Megatron's training loop wrote (torch's files:
# one CRC32 per record): the sidecars it writes (cache dir, --into, --beside)
# make a resharded load read at most 1.05 times what it needs, values bit-exact
# to the whole-record read; every byte read still checked: a flipped data byte
# in a touched tile is refused naming the file and key (exit 2); a stale
# sidecar (data file appended to, a record rewritten with a new CRC32) or a
# damaged one is not used (one warning naming it) and the load still verifies
# (a cached one of a file grown since: the warning names the file);
# `index` refuses a bad record (exit 2, no sidecar for that file) and skips
# files distckpt wrote (their own index); the checkpoint is never modified.
# reshard and load say `hint: ... distckpt index` after reading torch's
# records whole (verify: that a load would), not once indexed; their
# --index-dir names the sidecars.
#   index_test.sh DISTCKPT FIXTURES_DIR
set -euo pipefail
d=$1 fixtures=$2
work=$(mktemp -d /tmp/distckpt-index-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$fixtures/megatron-runs/gpt-default-tp2" "$work/root"
ck=$work/root/iter_0000010
export DISTCKPT_INDEX_DIR=$work/empty  # no sidecar unless a test says so
(cd "$ck" && sha256sum .metadata *.distcp) > "$work/sums"
ratio() { sed -nE 's/.*: ([0-9]+) bytes read of ([0-9]+) needed.*/\1 \2/p' "$1"; }
# reshard NAME TOPOLOGY OUT [ENV...]: the load's "read needed" into $work/rn.
reshard() {
  local name=$1 t=$2 out=$3
  shift 3
  rm -rf "$out"
  env "$@" "$d" reshard "$ck" --spec gpt -t "$t" --out "$out" > "$work/r" 2>&1 ||
    { cat "$work/r"; fail "$name: reshard under $t"; }
  ratio "$work/r" > "$work/rn"
  [ -s "$work/rn" ] || { cat "$work/r"; fail "$name: no read/needed"; }
}
within() {  # within NAME BOUND: read <= BOUND * needed
  python3 -c 'import sys; r, n = map(int, open(sys.argv[1]).read().split()); b = float(sys.argv[2])
print("%s: %d / %d (%.3f)" % (sys.argv[3], r, n, r / n)); sys.exit(0 if r <= b * n else 1)' \
    "$work/rn" "$2" "$1" || fail "$1: read more than $2 x the bytes needed"
}
flip() {  # flip FILE OFFSET: xor one byte with 1
  python3 -c 'import sys; f, at = sys.argv[1], int(sys.argv[2]); b = bytearray(open(f, "rb").read())
b[at] ^= 1; open(f, "wb").write(b)' "$1" "$2"
}
# As written: torch's records, read whole to verify them.
reshard "as written" tp=4 "$work/out0"
python3 -c 'import sys; r, n = map(int, open(sys.argv[1]).read().split()); sys.exit(0 if r > 1.2 * n else 1)' \
  "$work/rn" || fail "as written: expected torch's whole-record reads (over 1.2 x)"
grep -q "distckpt index" "$work/r" || { cat "$work/r"; fail "as written: no hint suggesting distckpt index"; }
# The cache directory (DISTCKPT_INDEX_DIR) and --into.
DISTCKPT_INDEX_DIR=$work/cache "$d" index "$work/root" > "$work/i" 2>&1 || { cat "$work/i"; fail "index"; }
cat "$work/i"
[ "$(ls "$work/cache" | grep -c '\.dcpindex$')" = 2 ] || fail "index: not one sidecar per data file"
grep -q "2 data files indexed" "$work/i" || fail "index: summary"
"$d" index "$ck" --into "$work/into" > /dev/null 2>&1 || fail "index --into"
cmp <(cat "$work"/cache/*) <(cat "$work"/into/*) || fail "--into wrote other bytes than the cache"
for t in tp=1 tp=4 tp=2,pp=2; do
  reshard "cache $t" "$t" "$work/out1" DISTCKPT_INDEX_DIR="$work/cache"
  within "indexed (cache) under $t" 1.05
  ! grep -q "warning" "$work/r" || { cat "$work/r"; fail "cache $t: a warning"; }
  ! grep -q "^hint:" "$work/r" || { cat "$work/r"; fail "cache $t: a hint after index"; }
  if [ "$t" = tp=4 ]; then
    for f in "$work"/out0/*.distcp; do
      cmp "$f" "$work/out1/$(basename "$f")" || fail "indexed read differs from the whole-record read"
    done
  fi
done
# reshard --index-dir: the same sidecars, named on the command line.
rm -rf "$work/out1"
"$d" reshard "$ck" --spec gpt -t tp=4 --index-dir "$work/cache" --out "$work/out1" > "$work/r" 2>&1 ||
  { cat "$work/r"; fail "reshard --index-dir"; }
ratio "$work/r" > "$work/rn"
within "indexed (--index-dir) under tp=4" 1.05
# verify (metadata only) says what a load would read beyond its need, and the
# same hint; not once the files are indexed (--index-dir, or the cache).
"$d" verify "$ck" --spec gpt -t tp=4 > "$work/v" 2>&1 || { cat "$work/v"; fail "verify"; }
grep -q "^hint: a load under tp=4 would read at least [0-9]* bytes beyond .*distckpt index $ck" "$work/v" ||
  { cat "$work/v"; fail "verify as written: no hint suggesting distckpt index"; }
"$d" verify "$ck" --spec gpt -t tp=4 --index-dir "$work/cache" > "$work/v" 2>&1 &&
  DISTCKPT_INDEX_DIR=$work/cache "$d" verify "$ck" --spec gpt -t tp=4 >> "$work/v" 2>&1 ||
  { cat "$work/v"; fail "verify (indexed)"; }
[ "$(grep -c "under tp=4: loads" "$work/v")" = 2 ] || { cat "$work/v"; fail "verify (indexed): verdicts"; }
! grep -q "^hint:" "$work/v" || { cat "$work/v"; fail "verify (indexed): a hint after index"; }
# load (a scenario's state, every element checked) of a DCP checkpoint torch
# wrote: the same hint, and --index-dir. torch never wrote a scenario's values
# here (no peer in this test), so a distckpt DCP save is made to look as
# torch's files do: each file cut at its items' end (no item index of its
# own) and the .metadata's distckpt entry renamed (the writer: PyTorch DCP).
"$d" save -t tp=2,pp=2 --dir "$work/torchlike" --format dcp > /dev/null 2>&1 || fail "save (load's)"
python3 -c 'import glob, struct, sys
for p in glob.glob(sys.argv[1] + "/*.distcp"):
    b = open(p, "rb").read()
    assert b[-8:] == b"DCPINDX5", p
    open(p, "wb").write(b[:struct.unpack("<Q", b[-40:-32])[0]])
m = open(sys.argv[1] + "/.metadata", "rb").read(); key = b"X\x08\x00\x00\x00distckpt"
assert m.count(key) == 1
open(sys.argv[1] + "/.metadata", "wb").write(m.replace(key, key[:-8] + b"notours_"))' "$work/torchlike"
[[ "$("$d" inspect "$work/torchlike")" == *"written by PyTorch DCP"* ]] ||
  fail "load's checkpoint: not torch's"
# load_read NAME [FLAGS...]: a load under tp=4; its "read needed" into $work/rn.
load_read() {
  local name=$1
  shift
  "$d" load -t tp=4 --dir "$work/torchlike" --saved-topology tp=2,pp=2 "$@" > "$work/r" 2>&1 ||
    { cat "$work/r"; fail "load ($name)"; }
  sed -nE 's/.*bytes needed ([0-9]+), bytes read ([0-9]+) .*/\2 \1/p' "$work/r" > "$work/rn"
  [ -s "$work/rn" ] || { cat "$work/r"; fail "load ($name): no bytes read"; }
  echo "load ($name): $(cat "$work/rn") (read needed)"
}
load_read "as written"
read -r whole _ < "$work/rn"
grep -q "^hint: .*distckpt index $work/torchlike" "$work/r" ||
  { cat "$work/r"; fail "load as written: no hint suggesting distckpt index"; }
"$d" index "$work/torchlike" --into "$work/loadidx" > /dev/null 2>&1 || fail "index (load's)"
load_read "--index-dir" --index-dir "$work/loadidx"
read -r indexed _ < "$work/rn"
[ "$indexed" -lt "$whole" ] || fail "load --index-dir: $indexed bytes read, not fewer than $whole"
! grep -q "^hint:" "$work/r" || { cat "$work/r"; fail "load --index-dir: a hint after index"; }
DISTCKPT_INDEX_DIR=$work/loadidx load_read "cache"
read -r cached _ < "$work/rn"
[ "$cached" = "$indexed" ] || fail "load (cache): $cached bytes read, --index-dir $indexed"
! grep -q "^hint:" "$work/r" || { cat "$work/r"; fail "load (cache): a hint after index"; }
# --beside: <file>.dcpindex next to each data file, found with no cache.
"$d" index "$ck" --beside > /dev/null 2>&1 || fail "index --beside"
for f in "$ck"/*.distcp; do [ -f "$f.dcpindex" ] || fail "--beside: no $f.dcpindex"; done
reshard "beside" tp=4 "$work/out1"
within "indexed (--beside) under tp=4" 1.05
# A flipped data byte in a tile the tp=4 ranks read part of (row 64 of the word
# embeddings' first chunk): refused naming the file and key, nothing written.
read -r file item < <("$d" inspect "$ck" --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin)["tensors"]["embedding.word_embeddings.weight"]["chunks"][0]
print(c["file"], c["byte_offset"])')
record() {  # record FILE ITEM_OFFSET: the first data byte of the item's data/N record
  python3 -c 'import struct, sys
f = open(sys.argv[1], "rb").read(); at = int(sys.argv[2])
while True:
    assert f[at:at + 4] == b"PK\x03\x04", at
    flags, = struct.unpack("<H", f[at + 6:at + 8]); size, = struct.unpack("<I", f[at + 18:at + 22])
    n, e = struct.unpack("<HH", f[at + 26:at + 30]); name = f[at + 30:at + 30 + n]; data = at + 30 + n + e
    if b"/data/" in name and not name.endswith(b".pkl"): break
    at = f.index(b"PK\x07\x08", data) + 16 if flags & 8 else data + size
print(data)' "$1" "$2"
}
data=$(record "$ck/$file" "$item")
flip "$ck/$file" $((data + 64 * 32 * 2 + 10))
for backend in threads $(command -v mpirun >/dev/null && echo mpi); do
  rm -rf "$work/out2"
  set +e
  "$d" reshard "$ck" --spec gpt -t tp=4 --backend $backend --out "$work/out2" > "$work/r" 2>&1
  rc=$?
  set -e
  [ $rc = 2 ] || { cat "$work/r"; fail "a flipped byte in a touched tile ($backend): exit $rc, not 2"; }
  grep -q "error (corruption).*CRC32 mismatch in $ck/$file for key 'embedding.word_embeddings.weight'" "$work/r" ||
    { cat "$work/r"; fail "the refusal ($backend) does not name the file and key"; }
  [ ! -e "$work/out2" ] || fail "a refused reshard ($backend) wrote its output"
  echo "a flipped byte in a touched tile: refused ($backend), naming $file and the key"
done
flip "$ck/$file" $((data + 64 * 32 * 2 + 10))
# Stale: a record rewritten with new bytes and a new CRC32 (descriptor and
# central directory): the sidecar's entry no longer binds (a partial read
# checks the record's data descriptor first; a whole read's hash disagrees);
# the load warns once naming the sidecar, reads the record whole and verifies
# it by its zip CRC32.
cp "$ck/$file" "$work/saved"
python3 -c 'import struct, sys, zlib
path, data = sys.argv[1], int(sys.argv[2]); f = bytearray(open(path, "rb").read())
desc = f.index(b"PK\x07\x08", data); size = desc - data
old = struct.unpack("<I", f[desc + 4:desc + 8])[0]
f[data + 4096 + 10] ^= 1
new = zlib.crc32(bytes(f[data:data + size]))
f[desc + 4:desc + 8] = struct.pack("<I", new)
cd = f.index(b"PK\x01\x02", desc)
while struct.unpack("<I", f[cd + 16:cd + 20])[0] != old: cd = f.index(b"PK\x01\x02", cd + 4)
f[cd + 16:cd + 20] = struct.pack("<I", new)
open(path, "wb").write(f)' "$ck/$file" "$data"
reshard "stale record" tp=4 "$work/out2"
grep -q "warning: $ck/$file.dcpindex: " "$work/r" ||
  { cat "$work/r"; fail "stale record: no warning naming the sidecar"; }
[ "$(grep -c warning "$work/r")" = 1 ] || { cat "$work/r"; fail "stale record: not one warning"; }
cp "$work/saved" "$ck/$file"
# Stale: the data file appended to (its size no longer the sidecar's).
echo x >> "$ck/$file"
reshard "stale size" tp=4 "$work/out2"
grep -q "warning: $ck/$file.dcpindex.*changed since" "$work/r" ||
  { cat "$work/r"; fail "stale size: no warning naming the sidecar"; }
cp "$work/saved" "$ck/$file"
rm "$ck"/*.dcpindex
# Stale in the cache: the data file grown since `index` (its cached sidecar is
# keyed by the old size): one warning naming the file and its size change
# (from the size record `index` keeps beside), and the load verifies as
# without a sidecar, the same values.
size=$(stat -c %s "$ck/$file")
echo grown >> "$ck/$file"
reshard "grown (cache)" tp=4 "$work/out2" DISTCKPT_INDEX_DIR="$work/cache"
grep -q "warning: $ck/$file: $((size + 6)) bytes, $size when \`distckpt index\` indexed it into $work/cache: its size changed since" "$work/r" ||
  { cat "$work/r"; fail "grown (cache): no warning naming the file and its size change"; }
[ "$(grep -c warning "$work/r")" = 1 ] || { cat "$work/r"; fail "grown (cache): not one warning"; }
for f in "$work"/out0/*.distcp; do
  cmp "$f" "$work/out2/$(basename "$f")" || fail "grown (cache): values differ"
done
cp "$work/saved" "$ck/$file"
# A damaged sidecar (its group directory): one warning naming it, the load
# verifies as without it, the same values.
cp -r "$work/cache" "$work/bad"
side=$(ls "$work"/bad/*.dcpindex | head -1)
python3 -c 'import sys; f = sys.argv[1]; b = bytearray(open(f, "rb").read()); b[-50] ^= 1
open(f, "wb").write(b)' "$side"
reshard "damaged sidecar" tp=4 "$work/out2" DISTCKPT_INDEX_DIR="$work/bad"
grep -q "warning: $side" "$work/r" || { cat "$work/r"; fail "damaged sidecar: no warning naming it"; }
[ "$(grep -c warning "$work/r")" = 1 ] || { cat "$work/r"; fail "damaged sidecar: not one warning"; }
for f in "$work"/out0/*.distcp; do
  cmp "$f" "$work/out2/$(basename "$f")" || fail "damaged sidecar: values differ"
done
# Under --backend mpi (a process a rank, each reading the sidecars itself).
if command -v mpirun >/dev/null; then
  rm -rf "$work/out2"
  DISTCKPT_INDEX_DIR=$work/cache "$d" reshard "$ck" --spec gpt -t tp=4 --backend mpi \
    --out "$work/out2" > "$work/r" 2>&1 || { cat "$work/r"; fail "mpi reshard"; }
  ratio "$work/r" > "$work/rn"
  within "indexed (cache, --backend mpi) under tp=4" 1.05
fi
# index refuses a bad record: exit 2 naming the file and key, no sidecar for that file.
flip "$ck/$file" $((data + 10))
set +e
"$d" index "$ck" --into "$work/refused" > "$work/i" 2>&1
rc=$?
set -e
flip "$ck/$file" $((data + 10))
[ $rc = 2 ] || { cat "$work/i"; fail "index of a bad record: exit $rc, not 2"; }
grep -q "CRC32 mismatch in $ck/$file for key 'embedding.word_embeddings.weight'" "$work/i" ||
  { cat "$work/i"; fail "index: the refusal does not name the file and key"; }
# (__0_0.distcp is the first file indexed: nothing was written.)
[ -z "$(ls "$work/refused" 2>/dev/null)" ] || fail "index wrote a sidecar for a file with a bad record"
echo "index of a flipped record: refused, naming $file and the key"
# distckpt's own files: skipped (they carry their index).
"$d" reshard "$ck" --spec gpt -t tp=2 --format dcp --out "$work/resaved" > /dev/null 2>&1 || fail "resave"
"$d" index "$work/resaved" --into "$work/own" > "$work/i" 2>&1 || { cat "$work/i"; fail "index (own)"; }
grep -q "has an item index of its own" "$work/i" || { cat "$work/i"; fail "own index not skipped"; }
[ -z "$(ls "$work/own")" ] || fail "a sidecar for a file distckpt wrote"
# The checkpoint itself was never modified.
(cd "$ck" && sha256sum -c --quiet "$work/sums") || fail "the checkpoint changed"
[ -z "$(ls "$ck" | grep dcpindex)" ] || fail "a sidecar left beside"
echo "index_test: ok"
