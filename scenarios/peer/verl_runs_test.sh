#!/usr/bin/env bash
# distckpt reshard of verl's own FSDP checkpoints (fixtures/verl-runs) to other world sizes,
# resumed by verl's own FSDPCheckpointManager.load_checkpoint (ctest label `peer`):
#   verl_runs_test.sh DISTCKPT
# env VERL_SRC: a verl tree holding verl/ (fixtures made from volcengine/verl b178a3cd5;
# fixtures/verl-runs/README.md). For each case below, `distckpt reshard STEP --world-size N
# [--fsdp V]` writes the step folder for N ranks; verl_run.py load has verl's load_checkpoint
# read it on N gloo CPU ranks (torch 2 chroot), and everything it restored (every full model
# tensor and per-parameter optimizer state tensor by sha256, Adam's step, param groups, the
# lr scheduler, the RNG state of each rank n: source rank n mod W's) equals what verl restored
# from the source under its own world size (expected/<root>/global_step_2.json).
# Skipped (exit 77) without the torch 2 chroot (DISTCKPT_TORCH2_PYTHON) or VERL_SRC.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures/verl-runs" && pwd)
src=${VERL_SRC:-}
need_torch2
need_tree VERL_SRC "a verl tree" verl/utils/checkpoint/fsdp_checkpoint_manager.py
# The chroot sees the host's /tmp only.
make_work verl-runs-peer
cp "$fixtures"/*.py "$work/"
cases=${VERL_RUNS_CASES:-"fsdp1-w4:3:1 fsdp1-w4:6:1 fsdp2-w4:3:2 fsdp2-w4:6:2 fsdp1-w4:3:2 fsdp2-w3:4:1
  fsdp1-tied-w2:5:2 fsdp2-tied-w2:3:1 fsdp1-w4:1:1 fsdp2-w3:1:2 fsdp1-w3:8:1"}
for c in $cases; do
  IFS=: read -r name world fsdp <<<"$c"
  out=$work/$name-to-$world-fsdp$fsdp
  step=global_step_$(cat "$fixtures/$name/latest_checkpointed_iteration.txt")
  tied=; [[ $name == *tied* ]] && tied=1  # the model verl_run.py builds (README)
  "$exe" reshard "$fixtures/$name/$step" --world-size "$world" --fsdp "$fsdp" --out "$out"
  VERL_RUN_TIED=$tied $python "$work/verl_run.py" load "$out" --fsdp "$fsdp" --world "$world" \
    --out "$out.json" --verl "$src" 2>&1 | grep -v -i "warn" | tail -5 || true
  python3 - "$fixtures/expected/$name/$step.json" "$out.json" <<'PY'
import json, sys
exp, got = (json.load(open(p)) for p in sys.argv[1:3])
for part in ("model", "optimizer", "lr_scheduler"):
    assert got[part] == exp[part], (sys.argv[2], part)
# FSDP1 lists a group's parameters unit by unit, FSDP2 in module order.
norm = lambda groups: [dict(g, params=sorted(g["params"])) for g in groups]
assert norm(got["param_groups"]) == norm(exp["param_groups"]), (sys.argv[2], "param_groups")
W, N = exp["world_size"], got["world_size"]
for n in range(N):
    assert got["rng"][n] == exp["rng"][n % W], (sys.argv[2], "rng of rank", n)
print(f"{sys.argv[2]}: {len(got['model'])} model tensors, {len(got['optimizer'])} parameters' "
      f"optimizer state, param groups, lr scheduler, {N} RNG states equal to the source's")
PY
done
# The comparison can fail: step 1's state against a resumed step 2 differs.
first=$(ls "$work"/*.json | head -1)
if python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a["model"] == b["model"] else 1)' "$fixtures/expected/fsdp1-w4/global_step_1.json" "$first"; then
  echo "step 1 compared equal to $first"; exit 1
fi
echo "verl runs: distckpt reshard resumed by verl's load_checkpoint OK"
