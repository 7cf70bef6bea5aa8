#!/usr/bin/env bash
# distckpt export --to fsdp-dtensor (ctest, label unit; no torch): Megatron's
# keys, the uneven Megatron-FSDP row chunks over dp x tp, values equal to the
# source checkpoint's (fp32 main params, Adam moments), the same export from
# two source layouts identical (`diff`), refused topologies.
#   fsdp_dtensor_export_test.sh DISTCKPT SCENARIO
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 spec=$2
make_work fsdp-dtensor-export
"$d" save "$spec" --topology tp=2 --dir "$work/tp2" >/dev/null
"$d" save "$spec" --topology dp=3 --dir "$work/dp3" --format fsdp-dtensor >/dev/null
"$d" export "$work/tp2" --to fsdp-dtensor "$work/out" --spec "$spec" --topology dp=3,tp=2
"$d" export "$work/dp3" --to fsdp-dtensor "$work/out2" --spec "$spec" --topology dp=3,tp=2 >/dev/null
# Identical tensors (the common state records the source tp).
"$d" diff "$work/out" "$work/out2" --exclude common
test ! -e "$work/out/common.pt" && test ! -e "$work/out/metadata.json"
"$d" inspect "$work/out" --check >/dev/null
"$d" inspect "$work/out" --json >"$work/out.json"
dump() { "$d" dump "$1" "$2" --out "$3" >/dev/null; }
dump "$work/out" model.module.decoder.layers.1.mlp.linear_fc1.weight_v "$work/v.bin"
dump "$work/tp2" optimizer.state.fp32_param.decoder.layers.mlp.linear_fc1.weight "$work/fc1.bin"
dump "$work/out" optimizer.state.module.module.module.decoder.layers.0.self_attention.linear_proj.weight.exp_avg "$work/proj.bin"
dump "$work/tp2" optimizer.state.exp_avg.decoder.layers.self_attention.linear_proj.weight "$work/proj-src.bin"
python3 - "$work" <<'PY'
import json, struct, sys
w = sys.argv[1]
md = json.load(open(f"{w}/out.json"))
t = md["tensors"]
model = sorted(k for k in t if k.startswith("model.module."))
opt = sorted(k for k in t if k.startswith("optimizer.state.module.module.module."))
assert len(model) == 23 and len(opt) == 46 and len(t) == 69, (len(model), len(opt), len(t))
assert "model.module.decoder.layers.0.mlp.linear_fc1.weight_w" in t
assert "model.module.decoder.layers.1.self_attention.linear_qkv.weight" in t
assert not any(k.endswith("linear_fc1.weight") or "_extra_state" in k for k in t)
assert all(v["dtype"] == "f32" for v in t.values())
assert set(md["common"]) == {"common", "optimizer", "checkpoint_version", "iteration"}, md["common"]
def chunks(key):
    return sorted((tuple(c["offset"]), tuple(c["shape"])) for c in t[key]["chunks"])
# Uneven rows: the embedding (20, 8) over dp=3 in each TP half [0, 10), [10, 20).
emb = chunks("model.module.embedding.word_embeddings.weight")
print("word_embeddings.weight chunks:", emb)
assert sorted(s[0] for _, s in emb) == [4, 4, 6, 6], emb
# linear_proj (8, 8): TP splits columns (Shard(1) inside), FSDP rows over dp.
print("linear_proj.weight chunks:", chunks("model.module.decoder.layers.0.self_attention.linear_proj.weight"))
for (off, shape) in chunks("model.module.decoder.layers.0.self_attention.linear_proj.weight"):
    assert off[1] in (0, 4) and shape[1] == 4, (off, shape)
# weight_w (12, 8): rows of each TP half [0, 6) and [6, 12), split unevenly over dp.
w_chunks = chunks("model.module.decoder.layers.0.mlp.linear_fc1.weight_w")
print("linear_fc1.weight_w chunks:", w_chunks)
assert sum(s[0] * s[1] for _, s in w_chunks) == 96
# final_layernorm: replicated over TP, one writer per row block.
assert sum(c["shape"][0] for c in t["model.module.decoder.final_layernorm.weight"]["chunks"]) == 8
def floats(path):
    raw = open(path, "rb").read()
    return struct.unpack(f"<{len(raw) // 4}f", raw)
v, fc1 = floats(f"{w}/v.bin"), floats(f"{w}/fc1.bin")  # fc1: (2 layers, 24 rows, 8)
assert v == fc1[24 * 8 + 12 * 8:2 * 24 * 8], "weight_v of layer 1 != fp32_param rows [12, 24)"
proj, src = floats(f"{w}/proj.bin"), floats(f"{w}/proj-src.bin")  # src: (2, 8, 8)
assert proj == src[:64], "exp_avg of layer 0's linear_proj differs"
print(f"{len(model)} model + {len(opt)} optimizer tensors, Megatron keys, values equal the source")
PY
# A refused topology is an input error (exit 2) naming it.
set +e
msg=$("$d" export "$work/tp2" --to fsdp-dtensor "$work/bad" --spec "$spec" --topology dp=2,pp=2 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "pp" <<<"$msg" || { echo "expected exit 2 for pp=2, got $rc: $msg"; exit 1; }
echo PASSED
