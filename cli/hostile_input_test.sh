#!/usr/bin/env bash
# Regression tests of issue 39 (the second trust probe): each hostile input is
# built for real (a deeply nested metadata.json, a zero field with the
# metadata checksum recomputed, a 16 GiB claim in a small file, metadata
# downgraded to version 1, FIFOs and links in a verl directory, a save over
# another format's checkpoint, bad numbers on the command line, damaged
# trackers) and every command must refuse it with exit 2 (1 for a verdict)
# and a message naming the file and field; never a signal, a hang or an OOM.
# Usage: hostile_input_test.sh DISTCKPT SCENARIO_DIR FIXTURE_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1
scenarios=$2
fixtures=$3
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
# expect CODE cmd...: runs cmd (20 s at most, 4 GiB of address space), checks its exit code.
expect() {
  local want=$1; shift
  set +e
  (ulimit -v 4194304; timeout -s KILL 20 "$@") >"$w/out" 2>"$w/err"
  local got=$?
  set -e
  [[ $got == "$want" ]] || { cat "$w/out" "$w/err" >&2; fail "exit $got, want $want: $*"; }
}
said() {  # said TEXT: the last command's stdout or stderr holds TEXT
  grep -qF -- "$1" "$w/out" "$w/err" || { cat "$w/out" "$w/err" >&2; fail "no '$1' in the output"; }
}
spec=$scenarios/tensors.json
"$d" save "$spec" --topology tp=2 --dir "$w/ck" >/dev/null

# Rewrites DIR/metadata.json by the Python statement(s) $2 on `md`, and
# recomputes metadata_checksum (XXH3-64 of the compact, key-sorted JSON
# without it) as a tool would, unless the version no longer has one.
edit_metadata() {
  python3 - "$1" "$2" <<'PY'
import ctypes, json, sys
path = sys.argv[1] + "/metadata.json"
md = json.load(open(path))
exec(sys.argv[2])
if md.get("format_version", 0) >= 2 and "metadata_checksum" in md:
    del md["metadata_checksum"]
    xxh = ctypes.CDLL("libxxhash.so.0")
    xxh.XXH3_64bits.restype = ctypes.c_uint64
    text = json.dumps(md, sort_keys=True, separators=(",", ":")).encode()
    md["metadata_checksum"] = "%016x" % xxh.XXH3_64bits(text, len(text))
open(path, "w").write(json.dumps(md))
PY
}

# A copy of the checkpoint that edit_metadata still seals (no edit): it must read.
cp -r "$w/ck" "$w/resealed"
edit_metadata "$w/resealed" "pass"
expect 0 "$d" inspect "$w/resealed"

# 1. metadata.json nested 90,000 levels deep (in common): refused before any
#    parse, by every reader, not a stack overflow.
cp -r "$w/ck" "$w/deep"
python3 - "$w/deep/metadata.json" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
depth = 90000
nested = "[" * depth + "1" + "]" * depth
key = '"common": '
at = text.index(key) + len(key)
# Replace the common value (an object) by the nested arrays.
level, end = 0, at
for end in range(at, len(text)):
    level += {"{": 1, "[": 1, "}": -1, "]": -1}.get(text[end], 0)
    if level == 0:
        break
open(path, "w").write(text[:at] + nested + text[end + 1:])
PY
deep_msg="metadata.json: not valid JSON: arrays and objects nested deeper than 512 levels"
expect 2 "$d" inspect "$w/deep"
said "$deep_msg"
expect 2 "$d" verify "$w/deep" --spec "$spec" -t tp=1 --data
said "$deep_msg"
expect 2 "$d" dump "$w/deep" layer.bias -o "$w/deep.bin"
said "$deep_msg"
expect 2 "$d" load "$spec" --topology tp=2 --dir "$w/deep"
said "$deep_msg"

# 2. A zero where the format needs at least 1, resealed: block_size 0 (was a
#    division by zero), format_version 0.
cp -r "$w/ck" "$w/zero"
edit_metadata "$w/zero" 'md["tensors"]["layer.bias"]["chunks"][0]["block_size"] = 0'
expect 2 "$d" verify "$w/zero" --spec "$spec" -t tp=1 --data
said 'tensors["layer.bias"].chunks[0].block_size: 0 is out of range [1, '
expect 2 "$d" dump "$w/zero" layer.bias -o "$w/zero.bin"
said "block_size: 0 is out of range"
cp -r "$w/ck" "$w/v0"
edit_metadata "$w/v0" 'md["format_version"] = 0'
expect 2 "$d" inspect "$w/v0"
said "format_version: 0 is out of range [1, "

# 3. A 16 GiB chunk claimed in a small data file (resealed, consistent
#    shapes): refused from the file's size, before a buffer of that size
#    (the 4 GiB address-space limit of `expect` would fail the allocation).
cp -r "$w/ck" "$w/huge"
edit_metadata "$w/huge" '
t = md["tensors"]["layer.bias"]
n = 8 << 30  # f16: 16 GiB
t["global_shape"] = [n]
c = t["chunks"][0]
c["shape"] = [n]
c["length"] = 2 * n'
for cmd in "verify $w/huge --spec $spec -t tp=1 --data" "dump $w/huge layer.bias -o $w/huge.bin" \
    "export $w/huge --to native $w/huge-out"; do
  # shellcheck disable=SC2086
  expect 2 "$d" $cmd
  said "layer.bias"
  said "is truncated"
done
expect 2 "$d" inspect "$w/huge" --check
said "is truncated"

# 5. Metadata downgraded to version 1 (no checksums) and a payload byte
#    flipped: verify --data cannot vouch for it and says so; with
#    --require-checksums it fails.
cp -r "$w/ck" "$w/v1"
python3 - "$w/v1" <<'PY'
import json, sys
d = sys.argv[1]
md = json.load(open(d + "/metadata.json"))
md["format_version"] = 1
del md["metadata_checksum"]
for t in md["tensors"].values():
    for c in t["chunks"]:
        c.pop("block_size", None)
        c.pop("sums_checksum", None)
for o in md["objects"].values():
    o.pop("checksum", None)
json.dump(md, open(d + "/metadata.json", "w"))
c = md["tensors"]["layer.weight"]["chunks"][0]
with open(d + "/" + c["file"], "r+b") as f:
    f.seek(c["byte_offset"] + 3)
    b = f.read(1)
    f.seek(c["byte_offset"] + 3)
    f.write(bytes([b[0] ^ 0x40]))
PY
expect 0 "$d" verify "$w/v1" --spec "$spec" -t tp=1 --data
said "UNVERIFIED"
said "metadata.json carry no checksum"
grep -q "every checksum matches" "$w/out" && fail "verify --data vouches for unchecked bytes"
expect 1 "$d" verify "$w/v1" --spec "$spec" -t tp=1 --data --require-checksums
said "--require-checksums: fails"
expect 0 "$d" verify "$w/ck" --spec "$spec" -t tp=1 --data --require-checksums
said "every checksum matches"
expect 2 "$d" verify "$w/ck" --spec "$spec" -t tp=1 --require-checksums  # needs --data

# 4. verl directories: a FIFO, a link to /dev/zero, a link out of the
#    directory; each refused at once, naming the file.
verl=$fixtures/verl/fsdp2-w4
cp -r "$verl" "$w/verl-fifo"
rm "$w/verl-fifo/fsdp_config.json"
mkfifo "$w/verl-fifo/fsdp_config.json"
expect 2 "$d" import-verl "$w/verl-fifo" --dir "$w/verl-out"
said "fsdp_config.json is not a regular file (a FIFO)"
cp -r "$verl" "$w/verl-rankfifo"
rm "$w/verl-rankfifo/model_world_size_4_rank_1.pt"
mkfifo "$w/verl-rankfifo/model_world_size_4_rank_1.pt"
expect 2 "$d" import-verl "$w/verl-rankfifo" --dir "$w/verl-out"
said "model_world_size_4_rank_1.pt is not a regular file"
cp -r "$verl" "$w/verl-zero"
ln -sf /dev/zero "$w/verl-zero/model_world_size_4_rank_0.pt"
expect 2 "$d" import-verl "$w/verl-zero" --dir "$w/verl-out"
said "model_world_size_4_rank_0.pt is a symbolic link"
cp -r "$verl" "$w/verl-out-link"
mv "$w/verl-out-link/fsdp_config.json" "$w/elsewhere.json"
ln -s "$w/elsewhere.json" "$w/verl-out-link/fsdp_config.json"
expect 2 "$d" import-verl "$w/verl-out-link" --dir "$w/verl-out"
said "fsdp_config.json is a symbolic link"
[[ ! -e "$w/verl-out/metadata.json" ]] || fail "a refused import committed a checkpoint"

# 6. A save or export into a directory holding another format's committed
#    checkpoint is refused unless told to replace it; export --to hf into a
#    non-empty directory is refused.
cp -r "$fixtures/dcp/torch-2.6/r1_single_file" "$w/torch"
expect 2 "$d" save "$spec" --topology tp=2 --dir "$w/torch"
said "refusing to save into $w/torch: it holds a DCP checkpoint (.metadata)"
expect 2 "$d" export "$w/ck" --to native "$w/torch"
said "it holds a DCP checkpoint (.metadata)"
[[ ! -e "$w/torch/metadata.json" ]] || fail "a refused save wrote metadata.json"
expect 0 "$d" save "$spec" --topology tp=2 --dir "$w/torch" --overwrite
[[ ! -e "$w/torch/.metadata" ]] || fail "--overwrite left torch's .metadata beside the new checkpoint"
expect 0 "$d" inspect "$w/torch"
mkdir -p "$w/zarr" && echo '{"zarr_format": 2}' >"$w/zarr/.zgroup"
expect 2 "$d" save "$spec" --topology tp=2 --dir "$w/zarr"
said "it holds a zarr store (.zgroup)"
expect 2 "$d" save "$spec" --topology tp=2 --dir "$w/verl-fifo" --format dcp
said "it holds a verl FSDP checkpoint"
expect 2 "$d" save "$spec" --topology tp=2 --dir "$w/ck"
said "(distckpt save --overwrite, SaveOptions::overwrite)"
mkdir -p "$w/hf" && echo '{"mine": true}' >"$w/hf/config.json"
expect 2 "$d" export "$w/ck" --to hf --spec names "$w/hf"
said "export --to hf: $w/hf is not empty (it holds config.json)"
grep -q mine "$w/hf/config.json" || fail "export --to hf replaced the user's config.json"

# 7. Strict numbers and lists on the command line; resource limits named.
expect 2 "$d" export "$w/ck" --to hf --spec names --max-shard-size -1 "$w/hf-new"
said "--max-shard-size: bad size '-1'"
expect 2 "$d" export "$w/ck" --to hf --spec names --max-shard-size 99999999999999999999GB "$w/hf-new"
said "bad size"
expect 2 "$d" train "$spec" --topology tp=1 --dir "$w/root" --steps 99999999999999999999
said "'99999999999999999999' is out of range"
expect 2 "$d" train "$spec" --topology tp=1 --dir "$w/root" --steps 0x10
said "is not a decimal integer"
expect 2 "$d" save "$spec" --topology tp=2, --dir "$w/comma"
said "invalid topology 'tp=2,': empty field"
expect 2 "$d" verify "$w/ck" --spec "$spec" -t tp=1048576
said "runs one thread per rank"
# ... refused before any thread or per-rank state is made, also without the
# address-space limit (was 1.8 GB resident and 5.8 s, starting threads until
# one failed): at most 2 s and 256 MiB.
set +e
/usr/bin/time -f '%e %M' -o "$w/time" timeout -s KILL 20 "$d" verify "$w/ck" --spec "$spec" \
  -t tp=1048576 >"$w/out" 2>"$w/err"
rc=$?
set -e
[[ $rc == 2 ]] || { cat "$w/out" "$w/err" >&2; fail "verify tp=1048576 without ulimit: exit $rc"; }
said "this machine allows at most"
read -r secs kib < <(tail -1 "$w/time")
python3 -c "import sys; sys.exit(0 if float('$secs') <= 2 and int('$kib') <= 262144 else 1)" ||
  fail "verify tp=1048576 took $secs s and $kib KiB resident"
# dump of a key not stored: the nearest names and the count, not every name
# (a checkpoint of 400 tensors).
python3 - "$w/many.json" <<'PY'
import json, sys
json.dump({"name": "many", "tensors": [{"key": "layers.%d.weight" % i, "shape": [2]}
                                       for i in range(400)]}, open(sys.argv[1], "w"))
PY
"$d" save "$w/many.json" --topology tp=1 --dir "$w/many" >/dev/null
expect 2 "$d" dump "$w/many" layers.77.weights -o "$w/many.bin"
said "holds no tensor 'layers.77.weights' and no object of that unique key (nearest of its 400 tensors: layers.77.weight, "
(( $(wc -c <"$w/err") < 400 )) || { cat "$w/err" >&2; fail "dump's message lists more than the nearest names"; }
# inspect --check refuses a linked data file as a load does.
cp -r "$w/ck" "$w/linked"
victim=$(cd "$w/linked" && ls | grep -v metadata.json | head -1)
mv "$w/linked/$victim" "$w/outside.bin"
ln -s "$w/outside.bin" "$w/linked/$victim"
expect 2 "$d" inspect "$w/linked" --check
said "$victim is a symbolic link"

# 7, 8. Trackers: a NUL is shown, not cut off; a leading space is accepted
#    as Megatron accepts it; 'release' without release/ fails the listing.
"$d" train "$spec" --topology tp=1 --dir "$w/root" --steps 2 >/dev/null
printf '2\0junk\n' >"$w/root/latest_checkpointed_iteration.txt"
expect 2 "$d" manage list "$w/root"
said "found '2\\x00junk'"
printf ' 2\n' >"$w/root/latest_checkpointed_iteration.txt"
expect 0 "$d" manage list "$w/root"
said "tracker: 2"
printf 'release\n' >"$w/root/latest_checkpointed_iteration.txt"
expect 1 "$d" manage list "$w/root"
said "the tracker says 'release' but $w/root/release is missing"
# A manifest with invalid UTF-8 is reported naming the file.
printf '2\n' >"$w/root/latest_checkpointed_iteration.txt"
manifest=$(ls "$w"/root/iter_0000002/*.json | head -1)
printf '{"iteration": "\xff\xfe"}' >"$manifest"
expect 1 "$d" manage list "$w/root"
said "$manifest: not valid JSON"

# JSON integers past their type in a file the user holds: Megatron's args in
# the common state (an HF export reads moe_router_topk; 2^64 - 1 was read as
# -1), refused naming the checkpoint and field.
gpt=$scenarios/hf-gpt-gqa.json
"$d" save "$gpt" --topology tp=1 --dir "$w/gpt" >/dev/null
edit_metadata "$w/gpt" 'md["common"]["args"] = {"moe_router_topk": 2**64 - 1}'
expect 2 "$d" export "$w/gpt" --to hf --spec "$gpt" "$w/gpt-hf"
said "$w/gpt: common args moe_router_topk: 18446744073709551615 is not an integer of signed 64 bits"
# verl's fsdp_config.json: an FSDP_version of 2^32 + 2 is not 2 (get<int>()
# truncated it and the reshard went on as FSDP2).
cp -r "$fixtures/verl-runs/fsdp2-w3/global_step_1" "$w/verl-version"
printf '{"FSDP_version": 4294967298, "world_size": 3}' >"$w/verl-version/actor/fsdp_config.json"
expect 2 "$d" reshard "$w/verl-version" --world-size 2 --out "$w/verl-version-out"
said "fsdp_config.json: FSDP_version: 4294967298 is not an integer of signed 32 bits"

echo "hostile inputs: ok"
