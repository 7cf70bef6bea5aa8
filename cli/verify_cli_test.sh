#!/usr/bin/env bash
# The CI gate on a saved checkpoint: inspect --check, verify (metadata only,
# reports), verify --data, reshard (threads, DCP round trip) + diff, and the
# JUnit / Markdown reports of a failing matrix and of a diff, each parsed.
# Usage: verify_cli_test.sh DISTCKPT SCENARIO_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1
scenarios=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
expect() {  # expect CODE cmd...
  local want=$1; shift
  set +e; "$@" >"$w/out" 2>"$w/err"; local got=$?; set -e
  [[ $got == "$want" ]] || { cat "$w/out" "$w/err" >&2; fail "exit $got, want $want: $*"; }
}

"$d" save "$scenarios/tensors.json" --topology tp=2,pp=2 --dir "$w/ck" >/dev/null

# inspect --check: a deleted data file (inspect alone: metadata only, exit 0).
cp -r "$w/ck" "$w/gone"
victim=$(ls "$w/gone" | grep -v metadata.json | head -1)
rm "$w/gone/$victim"
expect 0 "$d" inspect "$w/ck" --check
grep -q "data files present" "$w/out" || fail "inspect --check prints no check line"
expect 0 "$d" inspect "$w/gone"
expect 2 "$d" inspect "$w/gone" --check
grep -q "$victim is missing" "$w/err" || fail "inspect --check does not name $victim"
cp -r "$w/ck" "$w/short"
truncate -s 10 "$w/short/$victim"
expect 2 "$d" inspect "$w/short" --check
grep -q "$victim is truncated" "$w/err" || fail "inspect --check does not name the short file"

# verify: a spec with an omitted shape; tp=5 cannot split layer.weight's 24 rows.
cat >"$w/spec.json" <<'JSON'
{"name": "spec", "tensors": [{"key": "layer.weight", "shard": {"0": "tp", "1": "pp"}},
                             {"key": "layer.bias"}]}
JSON
expect 0 "$d" verify "$w/ck" --spec "$w/spec.json" -t tp=4,pp=2 -t dp=3
expect 1 "$d" verify "$w/ck" --spec "$w/spec.json" -t tp=2 -t tp=5 \
  --report "$w/v.json" --junit "$w/v.xml" --markdown "$w/v.md"
grep -q "WOULD NOT LOAD" "$w/out" || fail "verify prints no refusal"
python3 - "$w" <<'PY'
import json, sys, xml.etree.ElementTree as ET
w = sys.argv[1]
root = ET.parse(w + "/v.xml").getroot()
cases = root.findall(".//testcase")
assert [c.get("name") for c in cases] == ["tp=2", "tp=5"], [c.get("name") for c in cases]
failures = [c for c in cases if c.find("failure") is not None]
assert len(failures) == 1 and failures[0].get("name") == "tp=5"
assert "layer.weight" in failures[0].find("failure").get("message"), failures[0].find("failure").get("message")
assert root.find("testsuite").get("failures") == "1"
report = json.load(open(w + "/v.json"))
assert report["failed"] == 1 and report["passed"] == 1 and not report["ok"]
md = open(w + "/v.md").read()
assert "| ❌ | `tp=5` |" in md and "| ✅ | `tp=2` |" in md, md
PY
# Strict mode: a key the checkpoint lacks, raise_all: the load's message.
cat >"$w/extra.json" <<'JSON'
{"tensors": [{"key": "layer.bias"}, {"key": "not.saved", "shape": [3]}]}
JSON
expect 1 "$d" verify "$w/ck" --spec "$w/extra.json" -t tp=1 --strict raise_all
grep -q "not.saved" "$w/out" || fail "strict refusal does not name the key"
expect 0 "$d" verify "$w/ck" --spec "$w/extra.json" -t tp=1 --strict return_all
grep -q "unexpected keys: not.saved" "$w/out" || fail "return_all does not list the key"
# Bad input: exit 2.
expect 2 "$d" verify "$w/ck" --spec "$w/nonexistent.json" -t tp=1
expect 2 "$d" verify "$w/ck" --spec "$w/spec.json" -t tp=x

# verify --data: every byte once; a flipped byte names file and key.
expect 0 "$d" verify "$w/ck" --spec "$w/spec.json" -t tp=2 --data
grep -q "every checksum matches" "$w/out" || fail "verify --data prints no summary"
cp -r "$w/ck" "$w/flip"
python3 - "$w/flip" <<'PY'
import json, os, sys
d = sys.argv[1]
md = json.load(open(os.path.join(d, "metadata.json")))
# The first chunk of layer.weight: flip a byte in the middle of it.
chunk = md["tensors"]["layer.weight"]["chunks"][0]
path = os.path.join(d, chunk["file"])
with open(path, "r+b") as f:
    at = chunk["byte_offset"] + chunk["length"] // 2
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0xFF]))
print(chunk["file"])
PY
expect 2 "$d" verify "$w/flip" --spec "$w/spec.json" -t tp=2 --data
grep -q "layer.weight" "$w/err" || fail "verify --data does not name the key"
# Format v3 keeps each chunk's block checksums in the data file after its
# payload: a flipped one is named (file, key, rank) by verify --data; without
# them (cut off) inspect --check names the short file.
cp -r "$w/ck" "$w/sums"
python3 - "$w/sums" >"$w/sums.txt" <<'PY'
import json, os, sys
d = sys.argv[1]
md = json.load(open(os.path.join(d, "metadata.json")))
assert md["format_version"] == 5, md["format_version"]  # block checksums after each payload
# A chunk that is the last item of its data file (so cutting its block checksums off
# leaves every other item whole).
items = [(c["file"], c["byte_offset"], c) for t in md["tensors"].values() for c in t["chunks"]]
items += [(o["file"], o["byte_offset"], None) for o in md["objects"].values()]
ends = {}
for f, at, c in items:
    if f not in ends or at > ends[f][0]:
        ends[f] = (at, c)
chunk = next(c for at, c in ends.values() if c is not None and c["length"] > 0)
with open(os.path.join(d, chunk["file"]), "r+b") as f:
    at = chunk["byte_offset"] + chunk["length"] + 3  # block 0's checksum
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x01]))
key = next(k for k, t in md["tensors"].items() if chunk in t["chunks"])
print(chunk["file"], key, chunk["rank"], chunk["byte_offset"] + chunk["length"])
PY
read -r sums_file sums_key sums_rank sums_at <"$w/sums.txt"
expect 2 "$d" verify "$w/sums" --spec "$w/spec.json" -t tp=2 --data
grep -q "$sums_file for key '$sums_key' chunk at .* written by rank $sums_rank: its block checksums" \
  "$w/err" || { cat "$w/err" >&2; fail "verify --data does not name a damaged block checksum"; }
expect 0 "$d" inspect "$w/sums" --check
cp -r "$w/ck" "$w/nosums"
truncate -s "$sums_at" "$w/nosums/$sums_file"  # the payload stays whole
expect 2 "$d" inspect "$w/nosums" --check
grep -q "$sums_file is truncated.*'$sums_key' chunk at .* written by rank $sums_rank (its block checksums after it)" \
  "$w/err" || { cat "$w/err" >&2; fail "inspect --check does not name the cut block checksums"; }
expect 2 "$d" verify "$w/nosums" --spec "$w/spec.json" -t tp=2 --data
grep -q "$sums_file is truncated" "$w/err" || fail "verify --data does not name the short file"

# reshard: real values under tp=4 (native); to DCP under tp=2,pp=2,dp=2 and
# back to tp=2,pp=2 natively: the round trip diffs identical.
expect 0 "$d" reshard "$w/ck" --spec "$scenarios/tensors.json" -t tp=4 --out "$w/r4"
expect 1 "$d" diff "$w/ck" "$w/r4" --junit "$w/d.xml" --markdown "$w/d.md" --report "$w/d.json"
# Only the objects whose grid changes with TP/PP (rng_state per pp x tp) differ.
! grep "^only in\|^differs" "$w/out" | grep -v rng_state || fail "reshard lost more than rng_state"
grep -q "^only in $w/ck: rng_state" "$w/out" || fail "diff does not list rng_state"
python3 - "$w" <<'PY'
import json, sys, xml.etree.ElementTree as ET
w = sys.argv[1]
cases = ET.parse(w + "/d.xml").getroot().findall(".//testcase")
failed = [c.get("name") for c in cases if c.find("failure") is not None]
assert failed and all(n.startswith("rng_state") for n in failed), failed
assert any(c.get("name") == "layer.weight" for c in cases)
report = json.load(open(w + "/d.json"))
assert report["failed"] == len(failed) and report["identical"] is False
assert open(w + "/d.md").read().count("| ❌ |") == len(failed)
PY
# --exclude leaves rng_state out (identical); --only picks keys; --json is a verdict per key.
expect 0 "$d" diff "$w/ck" "$w/r4" --exclude 'rng_state*'
grep -q "^identical: .* keys left out (--only / --exclude)" "$w/out" || fail "diff --exclude"
expect 0 "$d" diff "$w/ck" "$w/r4" --only layer.weight --json
python3 - "$w/out" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
(case,) = report["cases"]
assert case["name"] == "layer.weight" and case["ok"], case
assert case["verdict"] == "identical" and case["differing"] == 0 and case["elements"] > 0, case
assert report["keys_skipped"] > 0 and report["identical"] is True, report
PY
expect 1 "$d" diff "$w/ck" "$w/r4" --only 'rng_state*' --json
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['failed']>0 and all(c['verdict']=='only_a' for c in r['cases']), r" "$w/out"
expect 0 "$d" reshard "$w/ck" --spec "$scenarios/tensors.json" -t tp=2,pp=2,dp=2 --out "$w/dcp" --format dcp
expect 0 "$d" reshard "$w/dcp" --spec "$scenarios/tensors.json" -t tp=2,pp=2 --out "$w/back"
expect 0 "$d" diff "$w/ck" "$w/back"
grep -q "^identical" "$w/out" || fail "round trip through DCP is not identical"
# --backend mpi: one process per rank of tp=4 gives the same checkpoint.
if command -v mpirun >/dev/null && ! "$d" reshard --help 2>&1 | grep -q "without MPI"; then
  mpi=(mpirun --oversubscribe -np 4)
  [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  expect 0 "${mpi[@]}" "$d" reshard "$w/ck" --spec "$scenarios/tensors.json" -t tp=4 \
    --out "$w/r4mpi" --backend mpi
  expect 0 "$d" diff "$w/r4" "$w/r4mpi"
fi
# reshard into an existing checkpoint is refused; a load refusal is exit 2.
expect 2 "$d" reshard "$w/ck" --spec "$scenarios/tensors.json" -t tp=4 --out "$w/r4"
expect 2 "$d" reshard "$w/ck" --spec "$w/spec.json" -t tp=5 --out "$w/r5"
[[ ! -e "$w/r5/metadata.json" ]] || fail "a failed reshard committed a checkpoint"

# A failing matrix: JUnit (one testcase per pair) and Markdown, parsed.
cat >"$w/matrix.json" <<'JSON'
{"name": "failing-matrix", "tensors": [{"key": "w", "shape": [6, 4], "shard": {"0": "tp"}}],
 "topologies": ["tp=1", "tp=2", "tp=4"]}
JSON
expect 1 "$d" run "$w/matrix.json" --matrix --report "$w/m.json" --junit "$w/m.xml" --markdown "$w/m.md"
python3 - "$w" <<'PY'
import json, sys, xml.etree.ElementTree as ET
w = sys.argv[1]
root = ET.parse(w + "/m.xml").getroot()
cases = root.findall(".//testcase")
assert len(cases) == 9, len(cases)
failed = sorted(c.get("name") for c in cases if c.find("failure") is not None)
# tp=4 cannot split 6 rows: its save fails (3 pairs) and loads under it fail (2 more).
assert failed == sorted(["tp=4 -> tp=1", "tp=4 -> tp=2", "tp=4 -> tp=4", "tp=1 -> tp=4",
                         "tp=2 -> tp=4"]), failed
assert int(root.get("failures")) == 5 and int(root.get("tests")) == 9
report = json.load(open(w + "/m.json"))
assert report["failed"] == 5 and report["scenario"] == "failing-matrix" and len(report["pairs"]) == 9
md = open(w + "/m.md").read().splitlines()
rows = [l for l in md if l.startswith("| ✅") or l.startswith("| ❌")]
assert len(rows) == 9 and sum(l.startswith("| ❌") for l in rows) == 5, md
assert rows[0].startswith("| ❌"), "failing rows come first"
assert any("FAIL" in l for l in md[:4]), md[:4]
PY
echo "verify_cli_test: ok"
