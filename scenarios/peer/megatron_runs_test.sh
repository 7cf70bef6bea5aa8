#!/usr/bin/env bash
# Regenerates fixtures/megatron-runs/ with Megatron-LM's own training code (ctest label `peer`):
#   megatron_runs_test.sh [ROOT ...]        (default: every root with a committed expected/)
# env MEGATRON_SRC: a Megatron-LM tree holding megatron/, pretrain_gpt.py, gpt_builders.py and
# model_provider.py (the fixtures were made from NVIDIA/Megatron-LM d98e8a6, see
# fixtures/megatron-runs/README.md).
# 1. make_megatron_runs.py trains and saves each root again on gloo CPU ranks (torch 2 chroot)
#    and has Megatron's load_checkpoint read every saved iteration back: the regenerated
#    expected/<root>.json equals the committed one (every global tensor's sha256, shape, dtype;
#    iteration, LR scheduler, param groups);
# 2. every tensor item of every committed iteration, read by plain torch.distributed.checkpoint,
#    equals the same item of the regenerated root bit for bit (the .metadata files differ: torch
#    puts a random save id in them; the common state holds args.save, a path);
# 3. megatron_resume.py: Megatron resumes each committed root under its own topology and under
#    another one bit-exact (exit 0; `other` below), refuses the dp_reshardable distributed
#    optimizer under another TP (exit 2), and a copy with one flipped tensor byte is caught
#    (exit 1).
# 4. with env DISTCKPT (the distckpt binary): `distckpt reshard ROOT --spec gpt` under other
#    topologies (threads and MPI), each resumed by Megatron bit-exact; the dp_reshardable
#    optimizer under another TP refused by distckpt as by Megatron.
# Skipped (exit 77) without the torch 2 chroot (DISTCKPT_TORCH2_PYTHON) or MEGATRON_SRC.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=${DISTCKPT:-}
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures/megatron-runs" && pwd)
src=${MEGATRON_SRC:-}
need_torch2
need_tree MEGATRON_SRC "a Megatron-LM tree" megatron/training/training.py pretrain_gpt.py
roots=("$@")
if [ ${#roots[@]} -eq 0 ]; then
  for f in "$fixtures"/expected/*.json; do roots+=("$(basename "$f" .json)"); done
fi
start=$(date +%s)
make_work megatron-runs  # under /tmp: the chroot sees it
mkdir -p "$work/src"
cp -r "$src/megatron" "$src/pretrain_gpt.py" "$src/gpt_builders.py" "$src/model_provider.py" "$work/src/"
cp "$fixtures"/*.py "$work/"
cp -r "$fixtures" "$work/committed"
echo "== Megatron trains and saves ${roots[*]} again (gloo CPU ranks)"
if ! $python "$work/make_megatron_runs.py" --megatron-src "$work/src" --out "$work/out" \
     --only "${roots[@]}" >"$work/gen.log" 2>&1; then
  cat "$work/gen.log"
  echo "FAIL: make_megatron_runs.py"
  exit 1
fi
grep -E "^(==|   iteration)" "$work/gen.log"
echo "== regenerated expected/ and tensors equal the committed ones"
cat > "$work/check.py" <<'PY'
import json, os, sys
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

committed, regen = sys.argv[1], sys.argv[2]
checked = 0
for name in sys.argv[3:]:
    exp = json.load(open(os.path.join(committed, "expected", name + ".json")))
    new = json.load(open(os.path.join(regen, "expected", name + ".json")))
    for it, want in exp["iterations"].items():
        got = new["iterations"].get(it)
        assert got is not None, f"{name}: iteration {it} was not regenerated"
        for key in sorted(set(want["tensors"]) | set(got["tensors"])):
            assert want["tensors"].get(key) == got["tensors"].get(key), \
                f"{name} iteration {it}: {key}: {got['tensors'].get(key)} != committed {want['tensors'].get(key)}"
        assert want["scalars"] == got["scalars"], f"{name} iteration {it}: scalars differ"
        sub = f"iter_{int(it):07d}"
        loaded = []
        for ck in (committed, regen):
            path = os.path.join(ck, name, sub)
            md = dcp.FileSystemReader(path).read_metadata()
            sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype)
                  for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
            dcp.load(sd, checkpoint_id=path)  # one process, no group
            loaded.append(sd)
        assert sorted(loaded[0]) == sorted(loaded[1]), (name, it, sorted(set(loaded[0]) ^ set(loaded[1])))
        for k, t in loaded[0].items():
            assert t.dtype == loaded[1][k].dtype and torch.equal(t.view(torch.uint8), loaded[1][k].view(torch.uint8)), \
                f"{name}/{sub}: tensor {k} differs between the committed and the regenerated root"
            checked += 1
    assert exp["argv"] == new["argv"], f"{name}: argv differs"
print(f"{checked} tensor items of the committed and the regenerated roots are identical; expected/ equal")
PY
if ! $python "$work/check.py" "$work/committed" "$work/out" "${roots[@]}" >"$work/check.log" 2>&1; then
  cat "$work/check.log"
  echo "FAIL: the regenerated roots"
  exit 1
fi
grep -v -i -E "warn" "$work/check.log" || true
echo "== Megatron resumes the committed roots (megatron_resume.py)"
failures=0
resume() {  # expected exit code, root dir, expected json, topology flags...
  local want=$1 dir=$2 exp=$3; shift 3
  local rc=0
  $python "$work/megatron_resume.py" --megatron-src "$work/src" --root "$dir" --expect "$exp" "$@" \
    </dev/null >"$work/resume.log" 2>&1 || rc=$?
  grep "^megatron_resume\|^  " "$work/resume.log" | grep -v -i warn | head -6
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: megatron_resume $(basename "$dir") $* exited $rc, want $want"
    failures=$((failures + 1))
  fi
}
# Another topology per root: exit 0 where Megatron resumes it, 2 where it refuses.
other() {
  case "$1" in
    gpt-default-tp2) echo "0 --tp 1" ;;
    llama-tp2-pp2) echo "0 --tp 1 --pp 1" ;;
    moe-ep2) echo "0 --ep 4" ;;
    distopt-dp2) echo "0 --dp 1"; echo "2 --tp 2 --dp 1" ;;  # dp_reshardable: DP only
    distopt-dp2-fullyreshardable) echo "0 --tp 2 --dp 1" ;;
    gpt-pp2) echo "0 --pp 1" ;;
  esac
}
for name in "${roots[@]}"; do
  exp="$work/committed/expected/$name.json"
  resume 0 "$work/committed/$name" "$exp"
  while read -r want flags; do
    [ -n "$want" ] || continue
    # shellcheck disable=SC2086
    resume "$want" "$work/committed/$name" "$exp" $flags
  done < <(other "$name")
done
# distckpt's reshard of a root (its tracker's iteration into OUT/iter_N plus a tracker, the
# model and optimizer inferred with --spec gpt): Megatron's load_checkpoint resumes it under the
# new topology with every model and optimizer value equal to the source's.
if [ -n "$exe" ]; then
  echo "== Megatron resumes distckpt's reshards (distckpt reshard ROOT --spec gpt)"
  reshards=(
    "gpt-default-tp2 threads tp=1 --tp 1"
    "gpt-default-tp2 mpi tp=1,pp=2 --tp 1 --pp 2"
    "llama-tp2-pp2 threads tp=1,pp=2 --tp 1 --pp 2"
    "gpt-pp2 threads tp=2 --tp 2 --pp 1"
    "distopt-dp2-fullyreshardable threads tp=2 --tp 2 --dp 1"
    "moe-ep2 threads dp=4,ep=4 --ep 4 --dp 4"
  )
  for line in "${reshards[@]}"; do
    read -r name backend topo flags <<<"$line"
    out="$work/reshard-$name-${topo//[=,]/_}"
    cmd=("$exe" reshard "$work/committed/$name" --spec gpt -t "$topo" --out "$out")
    if [ "$backend" = mpi ]; then
      w=1; IFS=, read -ra kv <<<"$topo"; for x in "${kv[@]}"; do w=$((w * ${x#*=})); done
      cmd=(mpirun --oversubscribe --allow-run-as-root -np "$w" "${cmd[@]}" --backend mpi)
    fi
    if ! "${cmd[@]}" >"$work/reshard.log" 2>&1; then
      cat "$work/reshard.log"; echo "FAIL: ${cmd[*]}"; failures=$((failures + 1)); continue
    fi
    # shellcheck disable=SC2086
    resume 0 "$out" "$work/committed/expected/$name.json" $flags
  done
  # dp_reshardable under another TP: distckpt refuses as Megatron does, writing nothing.
  if "$exe" reshard "$work/committed/distopt-dp2" --spec gpt -t tp=2 --out "$work/refused" \
      >"$work/reshard.log" 2>&1 || ! grep -q "(TP, PP) mismatch" "$work/reshard.log" ||
      [ -e "$work/refused/iter_0000010/.metadata" ]; then
    cat "$work/reshard.log"; echo "FAIL: dp_reshardable reshard under tp=2 not refused"
    failures=$((failures + 1))
  fi
fi
# A flipped byte in one tensor of the first root: the oracle reports a difference.
name=${roots[0]}
cp -r "$work/committed/$name" "$work/corrupt"
$python - "$work/corrupt" <<'PY'
import os, sys
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
root = sys.argv[1]
it = open(os.path.join(root, "latest_checkpointed_iteration.txt")).read().strip()
path = os.path.join(root, f"iter_{int(it):07d}")
md = dcp.FileSystemReader(path).read_metadata()
key = next(k for k, v in md.state_dict_metadata.items()
           if isinstance(v, TensorStorageMetadata) and k.startswith("decoder.layers.mlp.linear_fc1.weight"))
info = next(i for idx, i in md.storage_data.items() if idx.fqn == key)
with open(os.path.join(path, info.relative_path), "r+b") as f:
    f.seek(info.offset + info.length // 2)
    b = f.read(1)
    f.seek(info.offset + info.length // 2)
    f.write(bytes([b[0] ^ 0x40]))
print(f"flipped a byte of {key} in {info.relative_path}")
PY
resume 1 "$work/corrupt" "$work/committed/expected/$name.json"
if [ "$failures" -gt 0 ]; then
  echo "megatron runs test: $failures check(s) failed ($(($(date +%s) - start)) s)"
  exit 1
fi
echo "megatron runs test passed ($(($(date +%s) - start)) s)"
