#!/usr/bin/env bash
# verl per-rank FSDP files written by real torch 2.x (ctest label `peer`):
#   verl_peer_test.sh DISTCKPT VERL_CONVERT_TEST MAKE_FIXTURE_PY
# 1. torch (FSDP2 fully_shard on 4 gloo CPU ranks) writes a fresh verl
#    checkpoint exactly as verl's FSDPCheckpointManager does, plus its full
#    state dicts (expected/);
# 2. verl_convert_test reads it, converts it and loads it under 3, 6 and 1
#    ranks, every element equal to torch's full state dict;
# 3. `distckpt import-verl` converts it; `distckpt dump` of every model key
#    equals torch's full tensor (compared by torch);
# 4. `distckpt export --to hf --spec names` of it, read by the real
#    safetensors library, equals torch's full state dict.
# Skipped (exit 77) without the torch 2 chroot (DISTCKPT_TORCH2_PYTHON).
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1 convert_test=$2 make_fixture=$3
need_torch2
make_work verl  # under /tmp: the chroot sees it at the same path
cp "$make_fixture" "$work/make.py"
echo "== torch writes a verl FSDP2 checkpoint on 4 gloo ranks"
$python "$work/make.py" "$work/verl" 4 2>&1 | grep -v -i warn || true
test -f "$work/verl/model_world_size_4_rank_3.pt"
echo "== distckpt reads it, loads it under 3, 6 and 1 ranks"
DISTCKPT_VERL_CHECKPOINT="$work/verl" "$convert_test"
echo "== distckpt import-verl + dump equal torch's full state dict"
"$exe" import-verl "$work/verl" --dir "$work/ours"
mkdir "$work/dumps"
cat > "$work/check.py" <<'PY'
import subprocess, sys, torch
work, exe = sys.argv[1], sys.argv[2]
full = torch.load(f"{work}/verl/expected/model.pt")
for key, t in full.items():
    got = torch.frombuffer(bytearray(open(f"{work}/dumps/{key}.bin", "rb").read()), dtype=t.dtype)
    assert torch.equal(got.reshape(t.shape), t), key
print(f"{len(full)} model tensors equal torch's full state dict")
PY
for key in $($python -c "import torch; print(' '.join(torch.load('$work/verl/expected/model.pt')))"); do
  "$exe" dump "$work/ours" "$key" --out "$work/dumps/$key.bin" >/dev/null
done
$python "$work/check.py" "$work" "$exe"
echo "== distckpt export --to hf, read by safetensors, equals torch's full state dict"
"$exe" export "$work/ours" --to hf "$work/hf" --spec names \
  --config "$work/verl/huggingface/config.json" --max-shard-size 2KB
cat > "$work/check_hf.py" <<'PY'
import glob, sys, torch
from safetensors.torch import load_file
work = sys.argv[1]
full = torch.load(f"{work}/verl/expected/model.pt")
got = {}
for f in glob.glob(f"{work}/hf/*.safetensors"):
    got.update(load_file(f))
assert set(got) == set(full), (sorted(got), sorted(full))
for key, t in full.items():
    assert torch.equal(got[key], t), key
print(f"{len(got)} tensors read by safetensors equal torch's full state dict")
PY
$python "$work/check_hf.py" "$work"
