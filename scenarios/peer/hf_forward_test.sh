#!/usr/bin/env bash
# The proof of export --to hf is the forward pass (ctest hf_forward_peer, label peer):
#   hf_forward_test.sh DISTCKPT RUNS_DIR
# For Megatron training-loop roots (fixtures/megatron-runs: gpt-default-tp2 = GPT-2, tied,
# TP=2; llama-tp2-pp2 = Llama, untied, GQA, TP=2 x PP=2): Megatron's own GPTModel (built by
# megatron.training from the root's argv, loaded by its load_checkpoint under tp=1, float32,
# eval) and our forward pass over the exported safetensors loaded by HF parameter name
# (hf_forward.py, following transformers' modeling files) give the same logits on a fixed
# token sequence, to 1e-4 (float32 both; bf16 weights: far below bf16 rounding); a 10% change
# of one weight moves them past that (negative control). Skipped (77) without the torch 2.6
# chroot or the Megatron source (MEGATRON_SRC, default /tmp/megatron-src).
set -euo pipefail
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
work=$(mktemp -d /tmp/distckpt-hf-forward-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$runs"/megatron_run.py "$runs"/megatron_cpu.py "$here/hf_forward.py" "$work/"
port=29533
for name in gpt-default-tp2 llama-tp2-pp2; do
  cp -r "$runs/$name" "$work/$name"
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
done
echo "hf forward: ok"
