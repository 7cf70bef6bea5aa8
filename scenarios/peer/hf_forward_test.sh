#!/usr/bin/env bash
# The proof of export --to hf is the forward pass (ctest hf_forward_peer, label peer):
#   hf_forward_test.sh DISTCKPT RUNS_DIR
# For Megatron training-loop roots (fixtures/megatron-runs: gpt-default-tp2 = GPT-2, tied,
# TP=2; llama-tp2-pp2 = Llama, untied, GQA, TP=2 x PP=2; and roots Megatron's own training
# loop writes here, hf_forward.py EXTRA_ROOTS: mixtral-ep2 = Mixtral MoE, EP=2; qwen2-tp2 =
# Qwen2, tied, TP=2; qwen2moe-ep2 = Qwen2-MoE with gated shared expert, pre-softmax routing,
# EP=2): Megatron's own GPTModel (built by
# megatron.training from the root's argv, loaded by its load_checkpoint under tp=1, float32,
# eval) and our forward pass over the exported safetensors loaded by HF parameter name
# (hf_forward.py, following transformers' modeling files) give the same logits on a fixed
# token sequence, to 1e-4 (float32 both; bf16 weights: far below bf16 rounding); a 10% change
# of one weight moves them past that (negative control). Skipped (77) without the torch 2.6
# chroot or the Megatron source (MEGATRON_SRC, default /tmp/megatron-src).
# HF_FORWARD_KEEP=DIR keeps each export (DIR/<name>-hf) and Megatron's logits
# (DIR/<name>.megatron.pt) with hf_forward.py and hf_transformers.py: on a machine with
# the real `transformers` package, `python3 DIR/hf_transformers.py DIR/<name>-hf
# DIR/<name>.megatron.pt 1e-4` loads each export with AutoModelForCausalLM instead.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
d=$1 runs=$2
here=$(cd "$(dirname "$0")" && pwd)
root=/opt/distckpt-torch2
src=${MEGATRON_SRC:-/tmp/megatron-src}
if [ -n "${DISTCKPT_NO_PEERS:-}" ] || [ "$(id -u)" -ne 0 ] || [ ! -x "$root/usr/bin/python3" ] ||
   ! chroot "$root" python3 -c 'import torch, safetensors.torch' 2>/dev/null || [ ! -d "$src/megatron" ]; then
  echo "SKIPPED: needs the torch 2.6 chroot ($root) and the Megatron-LM source ($src)"
  exit 77
fi
case "$src" in /tmp/*) ;; *) echo "SKIPPED: MEGATRON_SRC must be under /tmp (the chroot sees the host's /tmp)"; exit 77 ;; esac
py="chroot $root env USE_LIBUV=0 OMP_NUM_THREADS=1 python3"
make_work hf-forward
cp "$runs"/megatron_run.py "$runs"/megatron_cpu.py "$here/hf_forward.py" "$work/"
for name in mixtral-ep2 qwen2-tp2 qwen2moe-ep2; do
  $py "$work/hf_forward.py" train "$work" "$name" "$src" "$work/$name" > "$work/$name.train.out" 2>&1 ||
    { tail -20 "$work/$name.train.out"; exit 1; }
  tail -1 "$work/$name.train.out"
done
port=29533
for name in gpt-default-tp2 llama-tp2-pp2 mixtral-ep2 qwen2-tp2 qwen2moe-ep2; do
  [ -d "$work/$name" ] || cp -r "$runs/$name" "$work/$name"
  HF_FORWARD_PORT=$port $py "$work/hf_forward.py" megatron "$work" "$work/$name" "$src" "$work/$name.megatron.pt" \
    > "$work/$name.megatron.log" 2>&1 || { tail -30 "$work/$name.megatron.log"; exit 1; }
  port=$((port + 1))
  grep '^megatron ' "$work/$name.megatron.log"
  it=$work/$name/iter_$(printf %07d "$(cat "$work/$name/latest_checkpointed_iteration.txt")")
  "$d" export "$it" --to hf "$work/$name-hf" --spec gpt | grep -v '^spec gpt inferred'
  $py "$work/hf_forward.py" hf "$work/$name-hf" "$work/$name.hf.pt"
  echo -n "$name: "
  $py "$work/hf_forward.py" compare "$work/$name.hf.pt" "$work/$name.megatron.pt" 1e-4
  $py "$work/hf_forward.py" hf "$work/$name-hf" "$work/$name.perturbed.pt" perturb >/dev/null
  echo -n "$name negative control (one weight x1.1): "
  $py "$work/hf_forward.py" compare "$work/$name.perturbed.pt" "$work/$name.megatron.pt" 1e-4 must-differ
  if [ -n "${HF_FORWARD_KEEP:-}" ]; then
    mkdir -p "$HF_FORWARD_KEEP"
    cp -r "$work/$name-hf" "$work/$name.megatron.pt" "$HF_FORWARD_KEEP/"
    cp "$here/hf_forward.py" "$here/hf_transformers.py" "$HF_FORWARD_KEEP/"
  fi
done
# The trained roots back: export -> import (the inferred model as the spec, their own
# topology) -> diff: every model tensor identical (cli_hf_megatron_runs does the fixtures).
for r in "mixtral-ep2 tp=1,ep=2,dp=2" "qwen2-tp2 tp=2"; do
  set -- $r
  it=$work/$1/iter_0000005
  "$d" export "$it" --to hf "$work/rt-$1-hf" --spec gpt | sed -n 's/^spec gpt inferred: //p' |
    python3 -c 'import json,sys; print(json.dumps({"model": json.load(sys.stdin)}))' > "$work/rt-$1.json"
  "$d" import "$work/rt-$1" --from hf "$work/rt-$1-hf" --spec "$work/rt-$1.json" --topology "$2" >/dev/null
  set +e; "$d" diff "$it" "$work/rt-$1" > "$work/rt-$1.diff"; set -e
  if grep -v -E '^only in [^ ]*: (optimizer\.|[^ ]*(rng_state|_extra_state|rerun_state_machine_state)/)|^differs: common state|^DIFFERENT: ' "$work/rt-$1.diff"; then
    echo "$1: import of the export differs"; exit 1
  fi
  echo "$1: export -> import ($2) -> diff: $(grep -oE '^DIFFERENT: [0-9]+ tensors' "$work/rt-$1.diff" | grep -oE '[0-9]+') model tensors identical"
done
echo "hf forward: ok"
