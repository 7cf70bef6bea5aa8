#!/usr/bin/env bash
# Hugging Face export against the real `safetensors` library (ctest label `peer`):
#   hf_peer_test.sh DISTCKPT SCENARIO
# Saves SCENARIO's GPT under tp=2,pp=2, exports it to HF safetensors shards
# (small --max-shard-size: several files), dumps every Megatron tensor, and has
# torch 2.6's safetensors (ci/setup-peers --torch2) load every exported
# tensor and compare it bit for bit (hf_peer.py); then imports a model the
# library itself wrote (distckpt import --from hf) and exports it again.
# Skipped (77) without the peer.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1 scenario=$2
here=$(cd "$(dirname "$0")" && pwd)
need_torch2 safetensors.torch
make_work hf-peer
cp "$here/hf_peer.py" "$scenario" "$work/"
"$exe" save "$scenario" --topology tp=2,pp=2 --dir "$work/ck"
"$exe" export "$work/ck" --to hf "$work/hf" --spec "$scenario" --max-shard-size 8KB
ls "$work/hf"
mkdir "$work/dumps"
for key in $("$exe" inspect "$work/ck" --json | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["tensors"]))'); do
  "$exe" dump "$work/ck" "$key" --out "$work/dumps/$key.bin" >/dev/null
done
$python "$work/hf_peer.py" check "$work/hf" "$work/dumps" "$work/$(basename "$scenario")"
# The other direction: an HF model written by the real library (one
# model.safetensors, torch's own header order) imported under another
# topology, then exported again: the same tensors, byte for byte.
$python - "$work/hf" "$work/hf-torch" <<'PY'
import json, os, sys
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1:]
os.makedirs(dst)
index = json.load(open(os.path.join(src, "model.safetensors.index.json")))
tensors = {}
for f in sorted(set(index["weight_map"].values())):
    tensors.update(load_file(os.path.join(src, f)))
save_file(dict(reversed(list(tensors.items()))), os.path.join(dst, "model.safetensors"),
          metadata={"format": "pt"})
print(f"safetensors wrote {len(tensors)} tensors to one model.safetensors")
PY
"$exe" import "$work/imported" --from hf "$work/hf-torch" --spec "$scenario" --topology tp=2,dp=2
"$exe" export "$work/imported" --to hf "$work/hf-again" --spec "$scenario" --max-shard-size 8KB
diff -r "$work/hf" "$work/hf-again"
echo "import of the safetensors-written model: exported again byte-identical"
