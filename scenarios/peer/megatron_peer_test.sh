#!/usr/bin/env bash
# Regenerates fixtures/megatron/ with real Megatron-Core (ctest label `peer`):
#   megatron_peer_test.sh [DISTCKPT]
# env MEGATRON_SRC: a Megatron-LM source tree (the folder holding megatron/; the fixtures
# were made from NVIDIA/Megatron-LM d98e8a6, see fixtures/megatron/README.md).
# 1. make_megatron_fixtures.py writes every fixture again with Megatron's own
#    dist_checkpointing.save on gloo CPU ranks (torch 2 chroot, at most 4 processes);
# 2. the regenerated expected/ equals the committed one, and every tensor of every
#    regenerated and every committed checkpoint, read back by plain
#    torch.distributed.checkpoint (no Megatron), equals the committed expected bytes;
# 3. with DISTCKPT: `distckpt diff` of each committed fixture and its regeneration is
#    identical, and Megatron's load under tp=1,pp=2 accepts what `distckpt reshard` of the
#    regenerated gpt-tp2-pp2 to tp=1,pp=2 wrote (every value, args an argparse.Namespace,
#    no common state keys Megatron did not save).
# Skipped (exit 77) without the torch 2 chroot (DISTCKPT_TORCH2_PYTHON) or MEGATRON_SRC.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
fixtures=$(cd "$here/../../fixtures/megatron" && pwd)
src=${MEGATRON_SRC:-}
need_torch2
need_tree MEGATRON_SRC "a Megatron-LM source tree" megatron/core/dist_checkpointing/serialization.py
start=$(date +%s)
make_work megatron-peer  # under /tmp: the chroot sees it
# The chroot sees /tmp only: copy the source and the generator there.
mkdir -p "$work/src"
cp -r "$src/megatron" "$work/src/"
cp "$fixtures/make_megatron_fixtures.py" "$work/make.py"
echo "== Megatron-Core writes the fixtures again (gloo CPU ranks)"
if ! $python "$work/make.py" --megatron-src "$work/src" --out "$work/out" >"$work/gen.log" 2>&1; then
  cat "$work/gen.log"
  echo "FAIL: make_megatron_fixtures.py"
  exit 1
fi
grep "^==" "$work/gen.log"
for f in "$fixtures"/expected/*/; do
  f=$(basename "$f")
  test -f "$work/out/$f/.metadata" || { echo "FAIL: $f was not regenerated"; exit 1; }
done
echo "== regenerated expected/ and checkpoints equal the committed expected tensors"
cat > "$work/check.py" <<'PY'
import hashlib, json, os, sys
import torch
import torch.distributed.checkpoint as dcp

committed, regen = sys.argv[1], sys.argv[2]
checked = 0
for name in sorted(os.listdir(os.path.join(committed, "expected"))):
    exp = json.load(open(os.path.join(committed, "expected", name, "expected.json")))
    new = json.load(open(os.path.join(regen, "expected", name, "expected.json")))
    assert exp == new, f"{name}: regenerated expected.json differs from the committed one"
    for ck in (regen, committed):  # the regenerated checkpoint, then the committed one
        md = dcp.FileSystemReader(os.path.join(ck, name)).read_metadata()
        want = {}
        for e in exp["tensors"]:
            want[e["key"]] = torch.zeros(e["shape"], dtype=getattr(torch, e["dtype"]))
            stored = md.state_dict_metadata[e["key"]]
            assert list(stored.size) == e["shape"], (ck, name, e["key"], stored.size)
        tensors = [k for k, v in md.state_dict_metadata.items() if hasattr(v, "chunks")]
        assert sorted(tensors) == sorted(want), (ck, name, sorted(tensors), sorted(want))
        dcp.load(want, checkpoint_id=os.path.join(ck, name))  # no process group: one process
        for e in exp["tensors"]:
            raw = want[e["key"]].contiguous().view(torch.uint8).numpy().tobytes()
            ref = open(os.path.join(committed, "expected", name, e["file"]), "rb").read()
            assert hashlib.sha256(ref).hexdigest() == e["sha256"], (name, e["file"])
            assert raw == ref, f"{ck}/{name}: {e['key']} differs from the expected tensor"
            checked += 1
print(f"{checked} tensors of the regenerated and the committed checkpoints equal expected/")
PY
cp -r "$fixtures" "$work/committed"
if ! $python "$work/check.py" "$work/committed" "$work/out" >"$work/check.log" 2>&1; then
  cat "$work/check.log"
  echo "FAIL: the regenerated tensors"
  exit 1
fi
grep -v -i -E "warn|^ *(device|and md)" "$work/check.log" || true
failures=0
if [ -n "$exe" ]; then
  echo "== distckpt diff: committed fixture vs regenerated"
  for f in "$fixtures"/expected/*/; do
    f=$(basename "$f")
    "$exe" diff "$fixtures/$f" "$work/out/$f" || failures=$((failures + 1))
  done
  echo "== distckpt reshard gpt-tp2-pp2 to tp=1,pp=2; Megatron loads it under tp=1,pp=2"
  if "$exe" reshard "$work/out/gpt-tp2-pp2" --topology tp=1,pp=2 --spec "$fixtures/gpt-spec.json" \
       --format dcp --out "$work/reshard"; then
    if ! $python "$work/make.py" --megatron-src "$work/src" --check-load "$work/reshard" \
         --tp 1 --pp 2 >"$work/load.log" 2>&1; then
      grep -v -i -E "warn|^ *(device|and md)|Unable to resolve" "$work/load.log" | tail -5
      echo "FAIL: Megatron cannot load distckpt's reshard output as it loads its own resave"
      failures=$((failures + 1))
    else
      grep "Megatron loads" "$work/load.log"
    fi
  else
    failures=$((failures + 1))
  fi
fi
if [ "$failures" -gt 0 ]; then
  echo "megatron peer test: $failures distckpt check(s) failed ($(($(date +%s) - start)) s)"
  exit 1
fi
echo "megatron peer test passed ($(($(date +%s) - start)) s)"
