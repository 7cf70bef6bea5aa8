#!/usr/bin/env bash
# Every error that reaches the CLI names its file (issue 39): each file of a
# checkpoint of every kind the CLI reads (native, torch DCP 2.6 and 1.13,
# Megatron's torch_dist and zarr, fsdp_dtensor, verl FSDP1 and FSDP2, an HF
# export) is damaged three ways in turn (cut to half, 64 bytes of 0xff in the
# middle, over the head), and the commands that read it (inspect, inspect
# --check, verify --data, export, import, import-verl) run under a 4 GiB
# address-space limit and a 20 s timeout. Each must exit 0 (the damage lies
# in bytes it does not read), 1 (a verdict) or 2 with the damaged file's name
# in its message; never a signal, a hang or an exit 2 naming no file.
# Usage: damaged_files_test.sh DISTCKPT SCENARIO_DIR FIXTURE_DIR
set -euo pipefail
d=$1 scenarios=$2 fixtures=$3
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
spec=$scenarios/hf-gpt-gqa.json
"$d" save "$spec" --topology tp=2 --dir "$w/native" >/dev/null
"$d" export "$w/native" --to hf "$w/hf" --spec "$spec" --max-shard-size 8KB >/dev/null
# A spec field of the wrong type names the spec (was a bare type_error).
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["model"]["prefix"]=5; json.dump(j,open(sys.argv[2],"w"))' \
  "$spec" "$w/badspec.json"
set +e
"$d" import "$w/o" "$w/hf" --from hf --spec "$w/badspec.json" --topology tp=1 2>"$w/err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "badspec.json: 'prefix' must be a string" "$w/err" || {
  cat "$w/err"; echo "FAIL: spec prefix 5: exit $rc"; exit 1; }

# Claims larger than the files (the load memory bound, issue 39): a 16 GiB
# chunk claimed by a zarr .zarray over a 32-byte chunk file, a 2^33-element
# array of 16-element chunks, and (with torch) a DCP .metadata whose tensor
# claims 16 GiB in a small data file. Each is refused from the files' sizes
# before any buffer of that size: under the 4 GiB address-space limit an
# allocation would fail.
claim() {  # claim DIR NAME-IN-MESSAGE: every reader exits 2 naming it
  local c
  for c in "inspect $1 --check" "export $1 --to native $w/claim-out" "dump $1 $2 -o $w/claim.bin"; do
    rm -rf "$w/claim-out"
    set +e
    # shellcheck disable=SC2086
    (ulimit -v 4194304; timeout -s KILL 20 "$d" $c) >"$w/claim.log" 2>&1
    rc=$?
    set -e
    [ $rc = 2 ] && grep -qF "$3" "$w/claim.log" || { cat "$w/claim.log"; echo "FAIL: $c: exit $rc"; exit 1; }
  done
}
layernorm=decoder.final_layernorm.weight
for grid in chunk array; do
  cp -r "$fixtures/megatron-zarr/gpt-tp2-pp2" "$w/zarr-$grid"
  python3 - "$w/zarr-$grid/$layernorm/.zarray" $grid <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["shape"] = [8 << 30]
j["chunks"] = [8 << 30] if sys.argv[2] == "chunk" else [16]
json.dump(j, open(sys.argv[1], "w"))
PY
done
claim "$w/zarr-chunk" $layernorm "$layernorm/0 of '$layernorm' holds 32 bytes"
claim "$w/zarr-array" $layernorm "$layernorm/.zarray: shape (8589934592,) in chunks of (16,)"
if [ -n "${DISTCKPT_TORCH2_PYTHON:-}" ]; then
  "$d" save "$scenarios/tensors.json" --topology tp=2 --dir "$w/dcp-huge" --format dcp >/dev/null
  cat >"$w/huge.py" <<'PY'
import pickle, sys, torch
p = sys.argv[1] + "/.metadata"
m = pickle.load(open(p, "rb"))
md = m.state_dict_metadata["layer.bias"]
md.size = torch.Size([8 << 30])
md.chunks = md.chunks[:1]
md.chunks[0].sizes, md.chunks[0].offsets = torch.Size([8 << 30]), torch.Size([0])
pickle.dump(m, open(p, "wb"))
PY
  $DISTCKPT_TORCH2_PYTHON "$w/huge.py" "$w/dcp-huge"
  claim "$w/dcp-huge" layer.bias "__0_0.distcp is truncated"
else
  echo "damaged_files_test: DISTCKPT_TORCH2_PYTHON unset: the DCP claim is not made"
fi

python3 - "$d" "$w" "$spec" \
  native="$w/native" hf="$w/hf" \
  dcp="$fixtures/dcp/torch-2.6/r2_sharded" dcp="$fixtures/dcp/torch-1.13/r1_file_per_item" \
  dcp="$fixtures/megatron-runs/gpt-default-tp2/iter_0000010" dcp="$fixtures/megatron/gpt-tp1-pp1" \
  dcp="$fixtures/megatron-zarr/gpt-tp2-pp2" dcp="$fixtures/fsdp-dtensor/torch-uneven" \
  verl="$fixtures/verl-runs/fsdp1-w3/global_step_1/actor" \
  verl="$fixtures/verl-runs/fsdp2-w3/global_step_1/actor" <<'PY'
import os, shutil, subprocess, sys
d, w, spec = sys.argv[1:4]
sources = [a.split("=", 1) for a in sys.argv[4:]]

def damage(path, how):
    b = open(path, "rb").read()
    m = len(b) // 2
    b = {"half": b[:m], "ff": b[:m] + b"\xff" * 64 + b[m + 64:],
         "head": b"\xff" * min(64, len(b)) + b[64:]}[how]
    open(path, "wb").write(b)

runs = bad = named = 0
for kind, src in sources:
    files = sorted(os.path.relpath(os.path.join(r, n), src)
                   for r, _, ns in os.walk(src) for n in ns)
    if len(files) > 16:  # zarr: every tensor's .zarray and a sample of chunks
        files = [f for i, f in enumerate(files) if f.endswith(".zarray") or i % 8 == 0]
    for rel in files:
        for how in ("half", "ff", "head"):
            ck = os.path.join(w, "ck")
            shutil.rmtree(ck, ignore_errors=True)
            shutil.copytree(src, ck, symlinks=True)
            damage(os.path.join(ck, rel), how)
            out = os.path.join(w, "exported")
            cmds = {"native": [["inspect", ck], ["inspect", ck, "--check"],
                               ["verify", ck, "--data", "--spec", spec, "-t", "tp=1"],
                               ["export", ck, "--to", "dcp", out]],
                    "dcp": [["inspect", ck], ["export", ck, "--to", "native", out]],
                    "verl": [["import-verl", ck, "--dir", out]],
                    "hf": [["import", out, ck, "--from", "hf", "--spec", spec, "--topology", "tp=2"]]}[kind]
            for c in cmds:
                shutil.rmtree(out, ignore_errors=True)
                runs += 1
                try:
                    p = subprocess.run(["bash", "-c", 'ulimit -v 4194304; exec timeout -s KILL 20 "$@"',
                                        "-", d] + c, capture_output=True, timeout=60)
                    rc, text = p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")
                except subprocess.TimeoutExpired:
                    rc, text = "hang", ""
                names = os.path.basename(rel) in text
                named += rc == 2 and names
                if rc not in (0, 1, 2) or (rc == 2 and not names):
                    bad += 1
                    print(f"FAIL: {src}/{rel} ({how}): {' '.join(c[:1])} exit {rc}: "
                          f"{text.strip().splitlines()[-1:] if text.strip() else ''}")
print(f"damaged files: {runs} runs, {named} refused naming the file, {bad} bad")
sys.exit(1 if bad or named == 0 else 0)
PY
