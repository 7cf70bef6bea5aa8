#!/usr/bin/env bash
# The CLI on Megatron-Core 0.15's legacy zarr format (ctest cli_zarr): on
# fixtures/megatron-zarr/gpt-tp2-pp2 (written by Megatron's own zarr save)
# inspect, inspect --check, verify --data (no checksums: UNVERIFIED), dump of
# every tensor equal to expected/, export --to dcp then diff identical, verify
# and reshard with the fixture's spec; damage refused naming the file.
#   zarr_cli_test.sh DISTCKPT FIXTURES
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
exe=$1 fixtures=$2
ck=$fixtures/gpt-tp2-pp2
expected=$fixtures/expected/gpt-tp2-pp2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$exe" inspect "$ck" >"$work/inspect"
grep -q "zarr format v1" "$work/inspect" || fail "inspect: $(cat "$work/inspect")"
grep -q "^11 tensors, 4 objects" "$work/inspect" || fail "inspect counts: $(cat "$work/inspect")"
"$exe" inspect "$ck" --check | grep -q "^check: .* data files present" || fail "inspect --check"

# Every tensor dumps to the bytes Megatron saved (expected/: sha256 and file).
keys=$(python3 -c 'import json,sys; [print(t["key"], t["file"], t["sha256"]) for t in json.load(open(sys.argv[1]))["tensors"]]' "$expected/expected.json")
[ "$(echo "$keys" | wc -l)" -eq 11 ] || fail "expected.json lists $(echo "$keys" | wc -l) tensors"
while read -r key file sha; do
  "$exe" dump "$ck" "$key" --out "$work/t.bin" >/dev/null
  cmp "$work/t.bin" "$expected/$file" || fail "dump $key differs from $file"
  [ "$(sha256sum "$work/t.bin" | cut -d' ' -f1)" = "$sha" ] || fail "dump $key sha256"
done <<<"$keys"

# export --to dcp: a torch_dist checkpoint, diff-identical, dumping the same bytes.
"$exe" export "$ck" --to dcp "$work/dcp" >/dev/null
[ -f "$work/dcp/.metadata" ] || fail "export wrote no .metadata"
"$exe" inspect "$work/dcp" | grep -q "dcp format" || fail "export is not dcp"
"$exe" diff "$ck" "$work/dcp" >"$work/diff" || fail "diff zarr dcp: $(cat "$work/diff")"
grep -q "identical" "$work/diff" || fail "diff: $(cat "$work/diff")"
while read -r key file sha; do
  "$exe" dump "$work/dcp" "$key" --out "$work/t.bin" >/dev/null
  cmp "$work/t.bin" "$expected/$file" || fail "dump of the export: $key"
done <<<"$keys"
# verify (and --data: no checksums, so UNVERIFIED) and reshard with the fixture's request
# spec (TP and PP changed).
"$exe" verify "$ck" --spec "$fixtures/gpt-spec.json" --topology tp=1,pp=2 --topology tp=4 \
  --data >"$work/v" || fail "verify --spec: $(cat "$work/v")"
[ "$(grep -c ': loads' "$work/v")" -eq 2 ] || fail "verify --spec: $(cat "$work/v")"
grep -q "UNVERIFIED: 59 chunks carry no checksum" "$work/v" ||
  fail "verify --data: $(cat "$work/v")"
"$exe" reshard "$ck" --spec "$fixtures/gpt-spec.json" --topology tp=1,pp=2 --out "$work/r" \
  --format dcp >/dev/null
while read -r key file sha; do
  "$exe" dump "$work/r" "$key" --out "$work/t.bin" >/dev/null
  cmp "$work/t.bin" "$expected/$file" || fail "dump of the reshard: $key"
done <<<"$keys"
# Writing zarr is refused (read only), exit 2, nothing written.
set +e
"$exe" reshard "$ck" --spec "$fixtures/gpt-spec.json" --topology tp=1,pp=2 --out "$work/z" \
  --format zarr 2>"$work/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "reshard --format zarr exited $rc"
grep -q "reads the zarr format but does not write it" "$work/err" || fail "$(cat "$work/err")"
[ ! -e "$work/z" ] || fail "reshard --format zarr left $work/z"

# A flipped byte: diff finds it; a truncated chunk file is refused naming it (exit 2).
cp -r "$ck" "$work/bad"
chunk="$work/bad/decoder.layers.self_attention.linear_qkv.weight/2.1.0"
printf '\x55' | dd of="$chunk" bs=1 seek=7 conv=notrunc status=none
set +e
"$exe" diff "$ck" "$work/bad" >"$work/d2"; rc=$?
set -e
[ $rc -eq 1 ] || fail "diff of a damaged copy exited $rc"
grep -q "differs: decoder.layers.self_attention.linear_qkv.weight" "$work/d2" || fail "$(cat "$work/d2")"
truncate -s -1 "$chunk"
set +e
"$exe" inspect "$work/bad" 2>"$work/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "inspect of a truncated chunk exited $rc"
grep -q "chunk file $chunk of 'decoder.layers.self_attention.linear_qkv.weight' holds 767 bytes" "$work/err" ||
  fail "$(cat "$work/err")"
echo "zarr: inspect, verify --data, dump, export --to dcp + diff, verify/reshard --spec: ok"
