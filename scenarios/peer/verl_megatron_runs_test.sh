#!/usr/bin/env bash
# distckpt reshard of verl's own Megatron checkpoints (fixtures/verl-runs/megatron-*) to
# another TP / PP / DP, resumed by verl's own MegatronCheckpointManager.load_checkpoint
# (ctest label `peer`):
#   verl_megatron_runs_test.sh DISTCKPT
# env VERL_SRC: a verl tree holding verl/ (volcengine/verl b178a3cd5); MEGATRON_015_SRC: a
# Megatron-LM tree of core_v0.15.0 holding megatron/ (default /tmp/megatron-0.15; the
# fixtures' README says how to extract it). For each case below, `distckpt reshard STEP
# --spec gpt -t T` writes the step folder for T's ranks; verl_megatron_run.py load has
# verl's load_checkpoint read it on gloo CPU ranks (torch 2 chroot), and every model and
# optimizer tensor it restored (sha256, model space), Adam's step and the LR scheduler equal
# what verl restored from the source under its own topology
# (expected/<root>/global_step_N.json); rank 0's RNG state too (rng_state regridded: the new
# (pp, tp) = (0, 0) holds the stored (0, 0)). A negative control: step 1's expected state
# never equals step 2's.
# Skipped (exit 77) without the torch 2 chroot, VERL_SRC or the Megatron 0.15 tree.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures/verl-runs" && pwd)
src=${VERL_SRC:-}
msrc=${MEGATRON_015_SRC:-/tmp/megatron-0.15}
need_torch2
need_tree VERL_SRC "a verl tree" verl/utils/checkpoint/megatron_checkpoint_manager.py
if [ ! -f "$msrc/megatron/core/optimizer/distrib_optimizer.py" ]; then
  echo "SKIPPED: MEGATRON_015_SRC ($msrc) is not a Megatron-LM core_v0.15.0 tree"
  exit 77
fi
# The chroot sees the host's /tmp only.
make_work verl-mruns-peer
mkdir -p "$work/verl-runs" "$work/megatron-runs"
cp "$fixtures"/*.py "$work/verl-runs/"
cp "$fixtures"/../megatron-runs/*.py "$work/megatron-runs/"
python3 - "$fixtures/expected/megatron-tp2-dp2/global_step_1.json" \
  "$fixtures/expected/megatron-tp2-dp2/global_step_2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["tensors"] for p in sys.argv[1:3])
same = [k for k in a if a[k]["sha256"] == b.get(k, {}).get("sha256")]
assert len(same) < len(a) // 2, f"step 1 and step 2 hold the same state: {same}"
PY
# root:tp:pp:world (the config follows the root's name)
cases=${VERL_MEGATRON_RUNS_CASES:-"megatron-tp2-dp2:1:2:2 megatron-tp2-dp2:1:1:3 megatron-qwen2-pp2:2:1:2
  megatron-qwen2-pp2:1:1:1"}
for c in $cases; do
  IFS=: read -r name tp pp world <<<"$c"
  config=llama; [[ $name == *qwen2* ]] && config=qwen2
  topo="tp=$tp,pp=$pp"
  dp=$((world / (tp * pp)))
  [ "$dp" -gt 1 ] && topo="$topo,dp=$dp"
  out=$work/$name-to-$tp-$pp-$world
  step=global_step_$(cat "$fixtures/$name/latest_checkpointed_iteration.txt")
  "$exe" reshard "$fixtures/$name/$step" --spec gpt -t "$topo" --out "$out" > "$out.txt"
  $python "$work/verl-runs/verl_megatron_run.py" load "$out" --config "$config" --tp "$tp" \
    --pp "$pp" --world "$world" --out "$out.json" --log "$out.log" --verl "$src" \
    --megatron "$msrc" || { tail -20 "$out.log"; echo "FAIL: $c: verl's load_checkpoint"; exit 1; }
  python3 - "$fixtures/expected/$name/$step.json" "$out.json" "$c" <<'PY'
import json, sys
exp, got = (json.load(open(p)) for p in sys.argv[1:3])
case = sys.argv[3]
assert set(exp["tensors"]) == set(got["tensors"]), \
    f"{case}: keys differ: {sorted(set(exp['tensors']) ^ set(got['tensors']))}"
bad = [k for k in exp["tensors"] if exp["tensors"][k] != got["tensors"][k]]
assert not bad, f"{case}: verl loaded other values for {bad}"
assert exp["scalars"] == got["scalars"], f"{case}: {exp['scalars']} != {got['scalars']}"
assert exp["rng"][0] == got["rng"][0], f"{case}: rank 0's RNG state differs"
print(f"{case}: verl's load_checkpoint equal ({len(exp['tensors'])} tensors, scalars, rank 0 RNG)")
PY
done
echo "ok"
