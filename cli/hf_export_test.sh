#!/usr/bin/env bash
# distckpt export --to hf (ctest): shard files, index, config; the same
# export from two topologies is byte-identical; a spec that disagrees with
# the checkpoint is an input error naming the key.
#   hf_export_test.sh DISTCKPT SCENARIO_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 scenarios=$2
make_work hf
for s in hf-gpt-gqa hf-gpt-tied; do
  spec=$scenarios/$s.json
  "$d" save "$spec" --topology tp=2,pp=2 --dir "$work/$s-a" >/dev/null
  "$d" save "$spec" --topology tp=1 --dir "$work/$s-b" --format dcp >/dev/null
  "$d" export "$work/$s-a" --to hf "$work/$s-hf-a" --spec "$spec" --max-shard-size 8KB
  "$d" export "$work/$s-b" --to hf "$work/$s-hf-b" --spec "$spec" --max-shard-size 8KB
  diff -r "$work/$s-hf-a" "$work/$s-hf-b"
  n=$(ls "$work/$s-hf-a" | grep -c '^model-.*-of-.*\.safetensors$')
  [ "$n" -ge 2 ] || { echo "$s: expected several shards, got $n"; exit 1; }
  python3 - "$work/$s-hf-a" "$s" <<'PY'
import json, os, sys
d, s = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
files = set(index["weight_map"].values())
assert files == {f for f in os.listdir(d) if f.endswith(".safetensors")}, files
names = set(index["weight_map"])
assert "model.layers.0.self_attn.k_proj.weight" in names and "model.norm.weight" in names
assert ("lm_head.weight" in names) == (s != "hf-gpt-tied"), names
total = 0
for f in files:
    raw = open(os.path.join(d, f), "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    total += len(raw) - 8 - n
cfg = json.load(open(os.path.join(d, "config.json")))
assert cfg["num_key_value_heads"] == 2 and cfg["tie_word_embeddings"] == (s == "hf-gpt-tied")
assert total == index["metadata"]["total_size"], (total, index["metadata"]["total_size"])
print(f"{s}: {len(names)} tensors in {len(files)} files, total_size {total}")
PY
done
# Megatron's TransformerEngine spec fuses the layer norms into the next
# linear (`linear_qkv.layer_norm_weight`, `linear_fc1.layer_norm_weight`): a
# checkpoint with those keys exports to the same bytes.
python3 - "$scenarios/hf-gpt-gqa.json" "$work/te.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"]["rename"] = {
    "decoder.layers.input_layernorm.weight": "decoder.layers.self_attention.linear_qkv.layer_norm_weight",
    "decoder.layers.pre_mlp_layernorm.weight": "decoder.layers.mlp.linear_fc1.layer_norm_weight"}
json.dump(s, open(sys.argv[2], "w"))
PY
"$d" save "$work/te.json" --topology tp=2,pp=2 --dir "$work/te" >/dev/null
"$d" inspect "$work/te" | grep -q "linear_qkv.layer_norm_weight" || { echo "rename not applied"; exit 1; }
"$d" export "$work/te" --to hf "$work/te-hf" --spec "$work/te.json" --max-shard-size 8KB
# (values are generated per key, so they differ: same names, shapes and files)
diff "$work/hf-gpt-gqa-hf-a/model.safetensors.index.json" "$work/te-hf/model.safetensors.index.json"
diff "$work/hf-gpt-gqa-hf-a/config.json" "$work/te-hf/config.json"
"$d" dump "$work/te" decoder.layers.mlp.linear_fc1.layer_norm_weight --out "$work/te-norm.bin" >/dev/null
python3 - "$work/te-hf" "$work/te-norm.bin" <<'PY'
import json, os, sys
d, dump = sys.argv[1], open(sys.argv[2], "rb").read()
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
for layer in range(4):
    name = f"model.layers.{layer}.post_attention_layernorm.weight"
    raw = open(os.path.join(d, index["weight_map"][name]), "rb").read()
    n = int.from_bytes(raw[:8], "little")
    b, e = json.loads(raw[8:8 + n])[name]["data_offsets"]
    got = raw[8 + n + b:8 + n + e]
    assert got == dump[layer * 64:(layer + 1) * 64], (name, got, dump[layer * 64:(layer + 1) * 64])
print("TE-fused layer norm keys: exported from linear_fc1.layer_norm_weight, equal to dump")
PY
# --spec gpt infers the model from the checkpoint; heads (and the unpadded
# vocab) come from --set; without heads it is refused naming the field.
"$d" export "$work/hf-gpt-gqa-a" --to hf "$work/gpt-hf" --spec gpt --set heads=8 \
  --set query_groups=2 --set vocab=100 --max-shard-size 8KB >/dev/null
diff -r "$work/hf-gpt-gqa-hf-a" "$work/gpt-hf"
set +e
"$d" export "$work/hf-gpt-gqa-a" --to hf "$work/gpt-hf2" --spec gpt 2> "$work/err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "heads" "$work/err" || { echo "--spec gpt without heads: exit $rc"; cat "$work/err"; exit 1; }
# A spec that disagrees with the checkpoint: exit 2 naming the key.
sed 's/"query_groups": 2/"query_groups": 4/' "$scenarios/hf-gpt-gqa.json" > "$work/bad.json"
set +e
"$d" export "$work/hf-gpt-gqa-a" --to hf "$work/bad-hf" --spec "$work/bad.json" 2> "$work/err"
rc=$?
set -e
[ $rc = 2 ] || { echo "bad spec: exit $rc"; exit 1; }
grep -q "linear_qkv" "$work/err" || { cat "$work/err"; exit 1; }
echo "hf export: ok"
