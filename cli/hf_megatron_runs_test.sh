#!/usr/bin/env bash
# export --to hf is exact or refused (ctest cli_hf_megatron_runs): for every
# root of fixtures/megatron-runs (written by Megatron's own training loop),
# `export --spec gpt` either exits 0 with every stored model byte accounted
# for (inspect's model tensors = HF bytes + the vocab padding rows named in
# the summary; optimizer state and objects reported as skipped), or exits 2
# naming what no HF architecture computes. The default GPT exports as GPT-2
# with the 8 tensors a Llama mapping used to drop; --drop leaves a tensor out
# and lists it; a model tensor no architecture places is refused by name.
#   hf_megatron_runs_test.sh DISTCKPT RUNS_DIR SCENARIO_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 runs=$2 scenarios=$3
make_work hf-runs
check_account() {  # check_account CKPT HF_DIR SUMMARY
  "$d" inspect "$1" --json > "$work/inspect.json"
  python3 - "$work/inspect.json" "$2" "$3" <<'PY'
import json, os, re, sys
insp, hf, summary = json.load(open(sys.argv[1])), sys.argv[2], open(sys.argv[3]).read()
size = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i64": 8, "i32": 4, "u8": 1, "i8": 1}
model = {k: t for k, t in insp["tensors"].items() if not k.startswith("optimizer.")}
model_bytes = 0
for k, t in model.items():
    n = 1
    for s in t["global_shape"]:
        n *= s
    model_bytes += n * size[t["dtype"]]
index = json.load(open(os.path.join(hf, "model.safetensors.index.json")))
hf_bytes = index["metadata"]["total_size"]
m = re.search(r"model tensors: (\d+) stored \((\d+) bytes\): (\d+) bytes exported, (\d+) bytes vocab "
              r"padding, (\d+) bytes dropped", summary)
assert m, summary
stored, total, exported, padding, dropped = map(int, m.groups())
assert stored == len(model), (stored, len(model))
assert total == model_bytes, (total, model_bytes)
assert exported == hf_bytes, ("summary says", exported, "index holds", hf_bytes)
# Every stored model byte: in the HF files, a padding row named in the summary, or dropped.
assert hf_bytes + padding + dropped == model_bytes, (hf_bytes, padding, dropped, model_bytes)
names = set(index["weight_map"])
assert not any("_extra_state" in n or "optimizer" in n for n in names), names
print(f"  {len(model)} model tensors, {model_bytes} bytes = {hf_bytes} in {len(names)} HF tensors"
      f" + {padding} padding + {dropped} dropped")
PY
}
for root in "$runs"/*/; do
  name=$(basename "$root")
  [ -f "$root/latest_checkpointed_iteration.txt" ] || continue
  it=$root/iter_$(printf %07d "$(cat "$root/latest_checkpointed_iteration.txt")")
  set +e
  "$d" export "$it" --to hf "$work/$name" --spec gpt >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  set -e
  echo "$name: exit $rc, $(grep -o 'architecture [A-Za-z0-9]*' "$work/$name.out" || true)"
  if [ $rc = 0 ]; then
    check_account "$it" "$work/$name" "$work/$name.out"
  elif [ $rc = 2 ]; then
    # Refused: only a model no supported architecture computes, named by its features.
    grep -q "no Hugging Face architecture computes this model" "$work/$name.err" ||
      { echo "$name: refused for another reason:"; cat "$work/$name.err"; exit 1; }
    [ "$name" = moe-ep2 ] || { echo "$name: refused unexpectedly:"; cat "$work/$name.err"; exit 1; }
    for feature in "MoE with LayerNorm" "learned_absolute" "without SwiGLU" "router bias"; do
      grep -q "$feature" "$work/$name.err" || { echo "$name: refusal does not name '$feature'"; cat "$work/$name.err"; exit 1; }
    done
    [ ! -e "$work/$name/model.safetensors.index.json" ] || { echo "$name: refused export left files"; exit 1; }
    cat "$work/$name.err"
  else
    echo "$name: export exit $rc"; cat "$work/$name.err"; exit 1
  fi
done
# The default GPT as GPT-2, with the tensors a Llama mapping dropped.
python3 - "$work/gpt-default-tp2" <<'PY'
import json, os, sys
hf = sys.argv[1]
names = set(json.load(open(os.path.join(hf, "model.safetensors.index.json")))["weight_map"])
cfg = json.load(open(os.path.join(hf, "config.json")))
assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"], cfg
assert cfg["tie_word_embeddings"] is True and "lm_head.weight" not in names
for n in ["transformer.wpe.weight", "transformer.h.0.mlp.c_fc.bias", "transformer.h.1.ln_1.bias",
          "transformer.h.1.ln_2.bias", "transformer.ln_f.bias", "transformer.h.0.attn.c_attn.bias",
          "transformer.h.0.attn.c_proj.bias", "transformer.h.1.mlp.c_proj.bias"]:
    assert n in names, n
assert len(names) == 2 + 2 + 2 * 12, sorted(names)
print("gpt-default-tp2: GPT-2 with position embeddings, every bias and LayerNorm bias")
PY
# --drop leaves a tensor out on purpose, and says so.
it=$runs/gpt-default-tp2/iter_0000010
"$d" export "$it" --to hf "$work/drop" --spec gpt --drop 'embedding.position_embeddings.*' > "$work/drop.out"
grep -q "dropped: embedding.position_embeddings.weight" "$work/drop.out" || { cat "$work/drop.out"; exit 1; }
! grep -q '"transformer.wpe.weight"' "$work/drop/model.safetensors.index.json" || { echo "--drop kept wpe"; exit 1; }
check_account "$it" "$work/drop" "$work/drop.out"
# A stored model tensor no architecture places: refused naming it, nothing written.
python3 - "$scenarios/hf-gpt-tied.json" "$work/extra.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["tensors"] = [{"key": "decoder.extra_scale.weight", "shape": [16], "dtype": "f32"}]
json.dump(s, open(sys.argv[2], "w"))
PY
"$d" save "$work/extra.json" --topology tp=2 --dir "$work/extra" >/dev/null
set +e
"$d" export "$work/extra" --to hf "$work/extra-hf" --spec "$work/extra.json" 2>"$work/extra.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "decoder.extra_scale.weight" "$work/extra.err" ||
  { echo "unplaced tensor: exit $rc"; cat "$work/extra.err"; exit 1; }
[ ! -e "$work/extra-hf/config.json" ] || { echo "refused export left files"; exit 1; }
"$d" export "$work/extra" --to hf "$work/extra-hf" --spec "$work/extra.json" --drop 'decoder.extra_*' |
  grep -q "dropped: decoder.extra_scale.weight"
# export -> import (the inferred model as the spec, the root's own topology) -> diff: every
# model tensor identical; only what HF does not carry differs (optimizer state, objects,
# common state).
for name in gpt-default-tp2 llama-tp2-pp2; do
  it=$runs/$name/iter_0000010
  "$d" export "$it" --to hf "$work/rt-$name-hf" --spec gpt | sed -n 's/^spec gpt inferred: //p' |
    python3 -c 'import json,sys; print(json.dumps({"model": json.load(sys.stdin)}))' > "$work/rt-$name.json"
  topo=$(python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print(f\"tp={e['tp']},pp={e['pp']}\")" "$runs/expected/$name.json")
  "$d" import "$work/rt-$name" --from hf "$work/rt-$name-hf" --spec "$work/rt-$name.json" --topology "$topo" >/dev/null
  set +e; "$d" diff "$it" "$work/rt-$name" > "$work/rt-$name.diff"; set -e
  if grep -v -E '^only in [^ ]*: (optimizer\.|[^ ]*(rng_state|_extra_state|rerun_state_machine_state)/)|^differs: common state|^DIFFERENT: ' "$work/rt-$name.diff"; then
    echo "$name: import of the export differs from the checkpoint"; exit 1
  fi
  n=$(grep -oE '^DIFFERENT: [0-9]+ tensors' "$work/rt-$name.diff" | grep -oE '[0-9]+')
  want=$("$d" inspect "$it" --json | python3 -c 'import json,sys; print(sum(1 for k in json.load(sys.stdin)["tensors"] if not k.startswith("optimizer.")))')
  [ "$n" = "$want" ] || { echo "$name: diff compared $n tensors, the model has $want"; exit 1; }
  echo "$name: export -> import ($topo) -> diff: $n model tensors identical"
done
# MoE in the grouped-GEMM key layout ("mlp.experts.linear_fc1.weight" [layers, experts, ...],
# the harness generator's): Mixtral names, one HF tensor per expert, and back identical.
python3 - "$scenarios/hf-gpt-tied.json" "$work/moe.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["name"] = "hf-moe"
s["model"].update({"experts": 4, "tied": False})
json.dump(s, open(sys.argv[2], "w"))
PY
"$d" save "$work/moe.json" --topology tp=2,ep=2,dp=2 --dir "$work/moe" >/dev/null
"$d" export "$work/moe" --to hf "$work/moe-hf" --spec gpt --set heads=4 --set query_groups=2 \
  --set vocab=50 --set topk=2 > "$work/moe.out"
grep -q "architecture MixtralForCausalLM" "$work/moe.out" || { cat "$work/moe.out"; exit 1; }
check_account "$work/moe" "$work/moe-hf" "$work/moe.out"
python3 - "$work/moe-hf" <<'PY'
import json, os, sys
names = set(json.load(open(os.path.join(sys.argv[1], "model.safetensors.index.json")))["weight_map"])
cfg = json.load(open(os.path.join(sys.argv[1], "config.json")))
assert cfg["num_local_experts"] == 4 and cfg["num_experts_per_tok"] == 2, cfg
for l in range(2):
    assert f"model.layers.{l}.block_sparse_moe.gate.weight" in names
    for e in range(4):
        for w in ("w1", "w2", "w3"):
            assert f"model.layers.{l}.block_sparse_moe.experts.{e}.{w}.weight" in names, (l, e, w)
print("grouped-GEMM expert layout: Mixtral, 4 experts x 2 layers")
PY
"$d" import "$work/moe-back" --from hf "$work/moe-hf" --spec "$work/moe.json" --topology tp=2,ep=2,dp=2 >/dev/null
set +e; "$d" diff "$work/moe" "$work/moe-back" > "$work/moe.diff"; set -e
if grep -v -E '^only in [^ ]*: [^ ]*(rng_state|_extra_state)/|^differs: common state|^DIFFERENT: ' "$work/moe.diff"; then
  echo "MoE: import of the export differs"; exit 1
fi
echo "MoE (grouped-GEMM layout): export -> import -> diff: every tensor identical"
echo "hf export of Megatron's runs: exact or refused: ok"
