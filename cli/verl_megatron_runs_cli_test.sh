#!/usr/bin/env bash
# distckpt on verl run roots written by verl's own MegatronCheckpointManager
# (fixtures/verl-runs/megatron-*, each step's expected/<root>/global_step_N.json
# what verl's load_checkpoint restored):
#   - manage list ROOT --layout verl: exit 0, every step complete (verl-megatron);
#   - inspect ROOT / STEP / STEP/actor read STEP/actor/dist_ckpt (said on stderr);
#     verify --data --spec gpt (sizes from verl's transformer_config.json) under the
#     saved topology, --strict raise_all: an exact request, every checksum matches;
#   - dump of every model and optimizer tensor: the sha256 verl's load gave;
#   - reshard STEP to another TP/PP: OUT/actor/dist_ckpt (the same values: dump
#     equal to verl's load), huggingface/, transformer_config.json with the new
#     sizes, data.pt, rng_state regridded (named); reshard ROOT: a root whose
#     tracker names the step (manage list exit 0);
#   - export --to hf: the model's tensors under HF (Llama / Qwen2) names;
#   - a step whose dist_ckpt lacks metadata.json (a save that never finished):
#     INCOMPLETE in manage list, refused by inspect (exit 2); no fixture file changed.
#   verl_megatron_runs_cli_test.sh DISTCKPT FIXTURES_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 fixtures=$2
make_work vmruns
# dump_equal CK EXPECTED_JSON [model|all]: every tensor of the expected file dumped from CK
# has the sha256 verl's load gave.
dump_equal() {
  local ck=$1 expected=$2 which=${3:-all} n=0
  python3 -c '
import json, sys
for k, v in sorted(json.load(open(sys.argv[1]))["tensors"].items()):
    if sys.argv[2] == "all" or not k.startswith("optimizer."): print(k, v["sha256"])' \
    "$expected" "$which" > "$work/want"
  while read -r key sha; do
    "$d" dump "$ck" "$key" --out "$work/t.bin" > /dev/null 2>&1 || fail "$ck: dump $key"
    got=$(sha256sum "$work/t.bin" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || fail "$ck: $key: dump sha256 $got, verl's load $sha"
    n=$((n + 1))
  done < "$work/want"
  [ $n -gt 8 ] || fail "$ck: only $n tensors compared"
  echo "$n"
}
roots=0
for root in "$fixtures"/megatron-*/; do
  root=${root%/}
  name=$(basename "$root")
  roots=$((roots + 1))
  cp -r "$root" "$work/$name"
  r=$work/$name
  before=$(sums "$r")
  step=global_step_$(cat "$r/latest_checkpointed_iteration.txt")
  exp=$fixtures/expected/$name/$step.json
  read -r topo other < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))
t = "tp=%d,pp=%d" % (e["tp"], e["pp"])
dp = e["world"] // (e["tp"] * e["pp"])
if dp > 1: t += ",dp=%d" % dp
print(t, "tp=1,pp=2" if e["tp"] > 1 else "tp=2,pp=1")' "$exp")
  expect_rc 0 "$d" manage list "$r" --layout verl
  grep -q INCOMPLETE "$work/out" && { cat "$work/out"; fail "$name: a step is incomplete"; }
  grep -q "complete .*verl-megatron" "$work/out" || { cat "$work/out"; fail "$name: not verl-megatron"; }
  for p in "$r" "$r/$step" "$r/$step/actor"; do
    expect_rc 0 "$d" inspect "$p"
    grep -q "reading $r/$step/actor/dist_ckpt" "$work/out" || { cat "$work/out"; fail "$p: not resolved"; }
  done
  expect_rc 0 "$d" inspect "$r/$step" --check
  expect_rc 0 "$d" verify "$r/$step" --data --spec gpt -t "$topo" --strict raise_all
  grep -q "every checksum matches" "$work/out" || fail "$name: verify --data"
  grep -q "under $topo: loads" "$work/out" || { cat "$work/out"; fail "$name: not exact under $topo"; }
  grep -q '"heads":4' "$work/out" || { cat "$work/out"; fail "$name: heads not from transformer_config.json"; }
  n=$(dump_equal "$r/$step" "$exp")
  # Every step, not only the tracker's.
  for e in "$fixtures/expected/$name"/global_step_*.json; do
    s=$(basename "$e" .json)
    dump_equal "$r/$s" "$e" > /dev/null
  done
  # Reshard to another TP/PP: the values are the same tensors.
  out=$work/$name-$other
  expect_rc 0 "$d" reshard "$r/$step" --spec gpt -t "$other" --out "$out"
  grep -q "object rng_state: regridded: .*carried regridded" "$work/out" ||
    { cat "$work/out"; fail "$name: rng_state fate not named"; }
  for f in actor/dist_ckpt/metadata.json actor/huggingface/config.json actor/transformer_config.json data.pt; do
    [ -f "$out/$f" ] || fail "$name: reshard wrote no $f"
  done
  cmp -s "$r/$step/data.pt" "$out/data.pt" || fail "$name: data.pt changed"
  [ "$(cd "$out" && find . -type f ! -path './actor/dist_ckpt/*' | sort | tr '\n' ' ')" = \
    "./actor/huggingface/config.json ./actor/transformer_config.json ./data.pt " ] ||
    fail "$name: reshard wrote other files: $(cd "$out" && find . -type f ! -path './actor/dist_ckpt/*')"
  python3 - "$out/actor/transformer_config.json" "$other" <<'PY' || fail "$name: transformer_config.json sizes"
import json, sys
tc = json.load(open(sys.argv[1]))
want = dict(kv.split("=") for kv in sys.argv[2].split(","))
assert tc["tensor_model_parallel_size"] == int(want["tp"]), tc["tensor_model_parallel_size"]
assert tc["pipeline_model_parallel_size"] == int(want["pp"]), tc["pipeline_model_parallel_size"]
assert tc["num_attention_heads"] == 4
PY
  expect_rc 0 "$d" verify "$out" --data --spec gpt -t "$other" --strict raise_all
  grep -q "every checksum matches" "$work/out" || fail "$name: verify --data of the reshard"
  expect_rc 0 "$d" inspect "$out"
  grep -q "rng_state/shard_" "$work/out" || { cat "$work/out"; fail "$name: reshard has no rng_state"; }
  m=$(dump_equal "$out" "$exp")
  outsums=$(sums "$out")
  expect_rc 2 "$d" reshard "$r/$step" --spec gpt -t "$other" --out "$out"
  grep -q "is not empty" "$work/out" || { cat "$work/out"; fail "$name: reshard over a folder"; }
  [ "$(sums "$out")" = "$outsums" ] || fail "$name: reshard over a folder changed it"
  # The root: a new root with the tracker's step.
  expect_rc 0 "$d" reshard "$r" --spec gpt -t "$other" --out "$work/$name-root"
  [ "$(cat "$work/$name-root/latest_checkpointed_iteration.txt")" = "${step#global_step_}" ] ||
    fail "$name: root reshard tracker"
  expect_rc 0 "$d" manage list "$work/$name-root" --layout verl
  grep -q "complete .*verl-megatron" "$work/out" || { cat "$work/out"; fail "$name: resharded root"; }
  # The root resaved in distckpt's native format still opens as a root (verify the root itself).
  expect_rc 0 "$d" reshard "$r" --spec gpt -t "$other" --format native --out "$work/$name-native"
  expect_rc 0 "$d" verify "$work/$name-native" --data --spec gpt -t "$other" --strict raise_all
  grep -q "every checksum matches" "$work/out" || { cat "$work/out"; fail "$name: native root"; }
  # HF export: the model under HF names.
  expect_rc 0 "$d" export "$r/$step" "$work/$name-hf" --to hf --spec gpt
  python3 - "$work/$name-hf" <<'PY' || fail "$name: HF export names"
import json, os, struct, sys
names = {}
for f in os.listdir(sys.argv[1]):
    if f.endswith(".safetensors"):
        with open(os.path.join(sys.argv[1], f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            names.update(json.loads(fh.read(n)))
names.pop("__metadata__", None)
for k in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
          "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
          "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight",
          "model.layers.0.input_layernorm.weight"):
    assert k in names, (k, sorted(names))
assert names["model.layers.1.self_attn.k_proj.weight"]["shape"] == [8, 16], names["model.layers.1.self_attn.k_proj.weight"]
assert names["model.layers.0.mlp.gate_proj.weight"]["shape"] == [24, 16]
PY
  [ "$(sums "$r")" = "$before" ] || fail "$name: files changed"
  echo "$name: ok ($n tensors equal to verl's load under $topo; $m after reshard to $other)"
done
[ $roots -gt 0 ] || fail "no megatron-* root under $fixtures"
# A save that never finished: Megatron writes dist_ckpt/metadata.json last.
r=$work/cut
cp -r "$fixtures/megatron-tp2-dp2" "$r"
rm "$r/global_step_2/actor/dist_ckpt/metadata.json"
expect_rc 1 "$d" manage list "$r" --layout verl
grep -q "2  INCOMPLETE.*verl component 'actor': dist_ckpt/metadata.json" "$work/out" ||
  { cat "$work/out"; fail "cut save not named"; }
expect_rc 2 "$d" inspect "$r/global_step_2"
echo "ok: $roots verl Megatron roots"
