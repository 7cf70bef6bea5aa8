#!/usr/bin/env bash
# distckpt's HF export of verl's FSDP checkpoints against verl's own model merger
# (`python -m verl.model_merger merge --backend fsdp`, run by fixtures/verl-runs/verl_merger.py
# with stand-ins for what it imports from transformers / accelerate / tqdm; ctest label `peer`):
#   verl_merger_test.sh DISTCKPT
# For FSDP1, FSDP2 and tied roots: import-verl + export --to hf --spec names --dtype bf16
# (verl's merger casts every tensor to bf16) holds exactly the merger's keys (tied: both
# model.embed_tokens.weight and lm_head.weight, as the merger's state dict) with equal
# bytes; without --dtype the export keeps the stored float32 and every tensor differs in
# dtype (the negative control). env VERL_SRC: a verl tree; skipped (77) without it or the chroot.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures/verl-runs" && pwd)
src=${VERL_SRC:-}
need_torch2
need_tree VERL_SRC "a verl tree" verl/model_merger/fsdp_model_merger.py
make_work verl-merger
cp "$fixtures/verl_merger.py" "$work/"
for name in fsdp1-w4 fsdp2-w3 fsdp1-tied-w2 fsdp2-tied-w2; do
  cp -r "$fixtures/$name" "$work/$name"
  actor=$work/$name/global_step_$(cat "$fixtures/$name/latest_checkpointed_iteration.txt")/actor
  $python "$work/verl_merger.py" merge --local_dir "$actor" --target_dir "$work/merged-$name" \
    --verl "$src" > "$work/merge-$name.txt" 2>&1 || { cat "$work/merge-$name.txt"; echo "FAIL: $name: verl's merger"; exit 1; }
  "$exe" import-verl "$actor" --dir "$work/src-$name" > /dev/null
  "$exe" export "$work/src-$name" "$work/hf-$name" --to hf --spec names --dtype bf16 \
    --config "$actor/huggingface/config.json" > /dev/null
  $python "$work/verl_merger.py" compare "$work/merged-$name" "$work/hf-$name" > "$work/cmp.txt" ||
    { cat "$work/cmp.txt"; echo "FAIL: $name: export differs from verl's merger"; exit 1; }
  if grep -q "^only in" "$work/cmp.txt"; then cat "$work/cmp.txt"; echo "FAIL: $name: key sets differ"; exit 1; fi
  n=$(grep -c "^equal" "$work/cmp.txt")
  [ "$n" -gt 20 ] || { echo "FAIL: $name: only $n tensors compared"; exit 1; }
  "$exe" export "$work/src-$name" "$work/hf32-$name" --to hf --spec names > /dev/null
  if $python "$work/verl_merger.py" compare "$work/merged-$name" "$work/hf32-$name" > /dev/null; then
    echo "FAIL: $name: the float32 export compared equal to the bf16 merger (the check is blind)"; exit 1
  fi
  echo "$name: $n tensors equal to verl's model merger (bf16)"
done
echo ok
