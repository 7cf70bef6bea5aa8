#!/usr/bin/env bash
# distckpt import --from hf and export --to native|dcp (ctest): a GPT saved
# under tp=2,pp=2, exported to HF, imported back under the same topology is
# the same checkpoint (diff: every tensor identical; only the objects and the
# common state, which HF does not carry, are absent); imported under other
# topologies and formats it exports to byte-identical HF files; format
# conversions diff identical; bad HF input is exit 2 naming the file or
# tensor, with nothing committed and no temporary left behind.
#   hf_import_test.sh DISTCKPT SCENARIO_DIR
set -euo pipefail
d=$1 scenarios=$2
work=$(mktemp -d /tmp/distckpt-hf-import-XXXXXX)
trap 'rm -rf "$work" "$work".lock' EXIT
expect_input_error() {  # expect_input_error PATTERN CMD...: exit 2, stderr names PATTERN
  local pattern=$1; shift
  set +e; "$@" >"$work/out" 2>"$work/err"; local rc=$?; set -e
  [ $rc = 2 ] || { echo "expected exit 2, got $rc: $*"; cat "$work/out" "$work/err"; exit 1; }
  grep -q -- "$pattern" "$work/err" || { echo "error does not name $pattern:"; cat "$work/err"; exit 1; }
}
for s in hf-gpt-gqa hf-gpt-tied; do
  spec=$scenarios/$s.json
  w=$work/$s
  "$d" save "$spec" --topology tp=2,pp=2 --dir "$w/a" >/dev/null
  "$d" export "$w/a" --to hf "$w/hf" --spec "$spec" --max-shard-size 8KB >/dev/null
  "$d" import "$w/b" --from hf "$w/hf" --spec "$spec" --topology tp=2,pp=2
  set +e; "$d" diff "$w/a" "$w/b" >"$w/diff"; set -e
  # Every tensor compared and equal; only objects and common state differ.
  if grep -v -E '^only in [^ ]*/a: [^ ]*(rng_state|_extra_state)/|^differs: common state|^DIFFERENT: ' "$w/diff"; then
    echo "$s: import differs from the saved checkpoint"; exit 1
  fi
  n=$(grep -oE '^DIFFERENT: [0-9]+ tensors' "$w/diff" | grep -oE '[0-9]+')
  [ "$n" = "$("$d" inspect "$w/a" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))')" ] ||
    { echo "$s: diff compared $n tensors"; cat "$w/diff"; exit 1; }
  "$d" export "$w/b" --to hf "$w/hf-b" --spec "$spec" --max-shard-size 8KB >/dev/null
  diff -r "$w/hf" "$w/hf-b"
  # Other topologies and formats: the same HF model back.
  for t in "tp=1 native" "pp=2,dp=2 dcp" "tp=2,dp=2 dcp-1.13"; do
    set -- $t
    "$d" import "$w/c-$1" --from hf "$w/hf" --spec "$spec" --topology "$1" --format "$2" >/dev/null
    "$d" export "$w/c-$1" --to hf "$w/hf-c-$1" --spec "$spec" --max-shard-size 8KB >/dev/null
    diff -r "$w/hf" "$w/hf-c-$1"
  done
  ! ls -d "$w"/*.hf-import 2>/dev/null || { echo "temporary import left behind"; exit 1; }
  # Format conversions keep every tensor, object and the common state.
  "$d" export "$w/a" --to dcp "$w/a-dcp"
  "$d" diff "$w/a" "$w/a-dcp" >/dev/null
  "$d" export "$w/a-dcp" --to native "$w/a-native" >/dev/null
  "$d" diff "$w/a" "$w/a-native" >/dev/null
done
# Bad input.
w=$work/hf-gpt-gqa spec=$scenarios/hf-gpt-gqa.json
cp -r "$w/hf" "$w/hf-missing"
rm "$w/hf-missing/model-00003-of-00012.safetensors"
expect_input_error "model-00003-of-00012.safetensors" \
  "$d" import "$w/x" --from hf "$w/hf-missing" --spec "$spec" --topology tp=2
# An HF tensor the spec's model has no place for (a shared expert, say): refused naming it,
# nothing written, unless --drop leaves it out on purpose (then listed).
cp -r "$w/hf" "$w/hf-extra"
python3 - "$w/hf-extra" <<'PY'
import json, struct, sys
d = sys.argv[1]
h = json.dumps({"model.layers.0.mlp.shared_expert.up_proj.weight":
                {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
h += b" " * (-len(h) % 8)
open(d + "/model-extra.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(8))
i = json.load(open(d + "/model.safetensors.index.json"))
i["weight_map"]["model.layers.0.mlp.shared_expert.up_proj.weight"] = "model-extra.safetensors"
json.dump(i, open(d + "/model.safetensors.index.json", "w"))
PY
expect_input_error "shared_expert.up_proj.weight" \
  "$d" import "$w/x" --from hf "$w/hf-extra" --spec "$spec" --topology tp=2
[ ! -e "$w/x" ] || { echo "a refused import left $w/x"; exit 1; }
"$d" import "$w/x-dropped" --from hf "$w/hf-extra" --spec "$spec" --topology tp=2 \
  --drop '*shared_expert*' > "$work/out"
grep -q "dropped (--drop): HF tensor 'model.layers.0.mlp.shared_expert.up_proj.weight'" "$work/out" ||
  { echo "import --drop: the dropped tensor is not listed"; cat "$work/out"; exit 1; }
sed 's/"ffn": 48/"ffn": 40/' "$spec" > "$work/bad-ffn.json"
expect_input_error "mlp.gate_proj.weight" \
  "$d" import "$w/x" --from hf "$w/hf" --spec "$work/bad-ffn.json" --topology tp=2
expect_input_error "no model.safetensors" \
  "$d" import "$w/x" --from hf "$work" --spec "$spec" --topology tp=2
expect_input_error "refusing to save into" "$d" import "$w/b" --from hf "$w/hf" --spec "$spec" --topology tp=2
[ ! -e "$w/x" ] || { echo "a failed import left $w/x"; ls -la "$w/x"; exit 1; }
! ls -d "$w"/*.hf-import 2>/dev/null || { echo "temporary import left behind"; exit 1; }
"$d" diff "$w/a" "$w/a-native" >/dev/null   # untouched by the failures
echo "hf import: ok"
