#!/usr/bin/env bash
# The verl run roots written by verl's own FSDPCheckpointManager
# (fixtures/verl-runs: FSDP1 and FSDP2, 4 and 3 ranks) through import-verl,
# inspect and dump: every model tensor and every per-parameter optimizer
# tensor (FSDP1: rebuilt from the flat per-unit shards) equal, byte for byte,
# to what verl's load_checkpoint restored (expected/<root>/<step>.json,
# sha256 of the bytes), Adam's step too; then manage list on the roots.
#   verl_runs_cli_test.sh DISTCKPT FIXTURES
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 fixtures=$2
make_work verl-runs
check() {  # root step [source folder]
  local root=$1 step=$2 out=$work/$1-$2-$(basename "${3:-x}")
  "$d" import-verl "${3:-$fixtures/$root/$step}/actor" --dir "$out" >/dev/null
  "$d" inspect "$out" > "$work/inspect.txt"
  python3 - "$d" "$out" "$fixtures/expected/$root/$step.json" "$work" <<'PY'
import hashlib, json, subprocess, sys
d, ckpt, expected_path, work = sys.argv[1:5]
exp = json.load(open(expected_path))
inspect = open(f"{work}/inspect.txt").read()
n = 0
def same(key, e):
    global n
    out = f"{work}/t.bin"
    subprocess.run([d, "dump", ckpt, key, "--out", out], check=True, stdout=subprocess.DEVNULL)
    got = hashlib.sha256(open(out, "rb").read()).hexdigest()
    assert got == e["sha256"], (expected_path, key, got, e["sha256"])
    assert key in inspect, key
    n += 1
for fqn, e in exp["model"].items():
    same(fqn, e)
for fqn, st in exp["optimizer"].items():
    for name, e in st.items():
        if e["shape"]:
            same(f"optimizer.state.{name}.{fqn}", e)
print(f"{expected_path}: {n} tensors equal to verl's load_checkpoint")
PY
}
for root in fsdp1-w4 fsdp2-w4 fsdp1-w3 fsdp2-w3; do check $root global_step_2; done
check fsdp1-w4 global_step_1
check fsdp1-tied-w2 global_step_1  # lm_head.weight tied to the embedding: one optimizer state
check fsdp2-tied-w2 global_step_1

# reshard to other world sizes (FSDP1 <-> FSDP2): what it writes reads back equal to the
# source (verl's own load of it: scenarios/peer/verl_runs_test.sh); per-rank state named.
for c in fsdp1-tied-w2:3:2 fsdp1-w4:3:1 fsdp1-w4:6:2 fsdp2-w3:4:1 fsdp2-w4:5:2; do
  IFS=: read -r root world fsdp <<<"$c"
  out=$work/re-$root-$world-$fsdp
  step=global_step_$(cat "$fixtures/$root/latest_checkpointed_iteration.txt")
  "$d" reshard "$fixtures/$root/$step" --world-size "$world" --fsdp "$fsdp" --out "$out" \
    > "$work/reshard.txt"
  grep -q "FSDP. world size .* -> FSDP$fsdp world size $world" "$work/reshard.txt"
  grep -q "data.pt (dataloader state: one per step, not per rank): kept" "$work/reshard.txt"
  grep -q "extra_state .* source rank n mod" "$work/reshard.txt"
  [ -f "$out/actor/model_world_size_${world}_rank_$((world - 1)).pt" ]
  grep -q "\"FSDP_version\": $fsdp" "$out/actor/fsdp_config.json"
  check "$root" "$step" "$out"
done
grep -q "kept for ranks 0..3; regridded for ranks 4..4" "$work/reshard.txt"  # 4 -> 5
# One rank (FSDP1 NO_SHARD: plain tensors) and back to three.
"$d" reshard "$fixtures/fsdp1-w4/global_step_2" --world-size 1 --out "$work/w1" >/dev/null
check fsdp1-w4 global_step_2 "$work/w1"
"$d" reshard "$work/w1" --world-size 3 --fsdp 2 --out "$work/w1-3" >/dev/null
check fsdp1-w4 global_step_2 "$work/w1-3"
rc=0; "$d" reshard "$fixtures/fsdp1-w4/global_step_2" --world-size 3 --out "$out" 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "reshard over an existing folder: rc=$rc"; exit 1; }

# HF export of verl's checkpoints (import-verl, then export --to hf --spec names): every
# safetensors tensor equal to verl's loaded model tensor, verl's config.json copied.
for root in fsdp1-w4 fsdp2-w3; do
  actor=$fixtures/$root/global_step_2/actor
  "$d" import-verl "$actor" --dir "$work/hfsrc-$root" >/dev/null
  "$d" export "$work/hfsrc-$root" --to hf "$work/hf-$root" --spec names \
    --config "$actor/huggingface/config.json" >/dev/null
  python3 - "$work/hf-$root" "$fixtures/expected/$root/global_step_2.json" "$actor" <<'PY'
import hashlib, json, os, struct, sys
out, expected, actor = sys.argv[1:4]
exp = json.load(open(expected))["model"]
index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
got = {}
for f in set(index["weight_map"].values()):
    raw = open(os.path.join(out, f), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for name, e in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__": continue
        a, b = e["data_offsets"]
        got[name] = (e["dtype"], e["shape"], hashlib.sha256(raw[8 + n + a:8 + n + b]).hexdigest())
assert set(got) == set(exp), (sorted(got), sorted(exp))
for k, e in exp.items():
    assert got[k] == ("F32", e["shape"], e["sha256"]), k
assert json.load(open(os.path.join(out, "config.json"))) == \
    json.load(open(os.path.join(actor, "huggingface", "config.json")))
print(f"{out}: {len(got)} HF tensors equal to verl's loaded model")
PY
done

# manage list / prune on verl roots: steps complete, exit 0; prune keeps verl's
# steps (not written by distckpt) unless --include-foreign; a missing or
# truncated rank file makes its step INCOMPLETE, naming the file.
for root in fsdp1-w4 fsdp2-w4 fsdp1-w3 fsdp2-w3; do
  out=$("$d" manage list "$fixtures/$root" --layout verl)
  [ "$(grep -c ' complete ' <<<"$out")" = 2 ] || { echo "$out"; exit 1; }
done
cp -r "$fixtures/fsdp1-w4" "$work/root"
"$d" manage prune "$work/root" --layout verl --keep 1 >/dev/null
[ -d "$work/root/global_step_1" ] || { echo "prune deleted verl's step"; exit 1; }
rm "$work/root/global_step_1/actor/optim_world_size_4_rank_2.pt"
out=$("$d" manage list "$work/root" --layout verl)
grep -q "1  INCOMPLETE.*optim_world_size_4_rank_2.pt is missing" <<<"$out" || { echo "$out"; exit 1; }
truncate -s 100 "$work/root/global_step_2/actor/model_world_size_4_rank_1.pt"
rc=0; out=$("$d" manage list "$work/root" --layout verl 2>&1) || rc=$?
[ $rc = 1 ] && grep -q "model_world_size_4_rank_1.pt is not a whole torch.save archive" <<<"$out" ||
  { echo "rc=$rc $out"; exit 1; }
echo "verl runs: import, dump, manage list/prune OK"
