#!/usr/bin/env bash
# Megatron's fsdp_dtensor checkpoints between distckpt and real torch 2.x
# (ctest label `peer`):   fsdp_dtensor_peer_test.sh DISTCKPT SCENARIO PEER_PY
# (a) distckpt writes: SCENARIO saved with --format fsdp-dtensor under dp=4
#     (Megatron-FSDP's uneven rows), and `export --to fsdp-dtensor` of a tp=2
#     save as dp=3 (Megatron's per-layer keys); torch loads each on 2 and 3
#     gloo ranks into Shard(0) DTensors, every element equal to `distckpt dump`;
# (b) torch writes fsdp_dtensor checkpoints from 3 ranks (1-D mesh) and from 4
#     ranks on a (dp_cp=2, tp=2) mesh (uneven DTensor chunks as Megatron's
#     uneven_dtensor.py sets them, bytes items); distckpt dumps equal torch's
#     full tensors, and after `reshard` under dp=2 (and tp=2,dp=3) too.
# Skipped (exit 77) without the torch 2 chroot (DISTCKPT_TORCH2_PYTHON).
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1 scenario=$2 peer=$3
need_torch2
make_work fsdp-dtensor  # the chroot sees /tmp at the same path
cp "$peer" "$work/peer.py"
peer() { timeout 300 $python "$work/peer.py" "$@" 2>&1 | grep -v -i -e warn -e "storage()" || true; }
# dump DIR OUT: every tensor of DIR (per .metadata) as OUT/<key>.bin
dump() {
  mkdir -p "$2"
  "$exe" inspect "$1" --json >"$work/inspect.json"
  for key in $(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['tensors']))" "$work/inspect.json"); do
    "$exe" dump "$1" "$key" --out "$2/$key.bin" >/dev/null
  done
}

echo "== (a) distckpt saves $scenario under dp=4 as fsdp-dtensor; torch loads it on 3 ranks"
"$exe" save "$scenario" --topology dp=4 --dir "$work/ours" --format fsdp-dtensor
test ! -e "$work/ours/common.pt" && test ! -e "$work/ours/metadata.json"
dump "$work/ours" "$work/ours-dumps"
out=$(peer load "$work/ours" 3 "$work/ours-dumps"); echo "$out"
grep -q "every element equal" <<<"$out"

echo "== (a) export --to fsdp-dtensor (Megatron's keys, dp=3,tp=2: uneven rows, TP inside); torch loads it on 2 ranks"
"$exe" save "$scenario" --topology tp=2 --dir "$work/tp2"
"$exe" export "$work/tp2" --to fsdp-dtensor "$work/exported" --spec "$scenario" --topology dp=3,tp=2
dump "$work/exported" "$work/exported-dumps"
test -f "$work/exported-dumps/model.module.decoder.layers.1.mlp.linear_fc1.weight_w.bin"
test -f "$work/exported-dumps/optimizer.state.module.module.module.decoder.layers.0.mlp.linear_fc1.weight_v.exp_avg.bin"
out=$(peer load "$work/exported" 2 "$work/exported-dumps"); echo "$out"
grep -q "every element equal" <<<"$out"

for case in "3 1" "4 2"; do
  set -- $case
  world=$1 tp=$2 ck="$work/torch-$1-$2"
  echo "== (b) torch writes an fsdp_dtensor checkpoint on $world ranks (tp=$tp); distckpt reads it"
  peer write "$ck" "$world" "$ck-expected" "$tp"
  test -f "$ck/.metadata"
  dump "$ck" "$ck-dumps"
  out=$(peer check "$ck-dumps" "$ck-expected"); echo "$out"
  grep -q "equal torch's full tensors" <<<"$out"
  "$exe" inspect "$ck" | grep "^common state" || true
  echo "== (b) distckpt loads it under dp=2 and tp=2,dp=3 (reshard), 1 rank (dump above)"
  peer spec "$ck" "$ck-spec.json"
  for to in dp=2 tp=2,dp=3; do
    "$exe" verify "$ck" -t "$to" --spec "$ck-spec.json"
    "$exe" reshard "$ck" --topology "$to" --spec "$ck-spec.json" --out "$ck-$to"
    dump "$ck-$to" "$ck-$to-dumps"
    out=$(peer check "$ck-$to-dumps" "$ck-expected"); echo "$out"
    grep -q "equal torch's full tensors" <<<"$out"
  done
done
echo "PASSED"
