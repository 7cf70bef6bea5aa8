#!/usr/bin/env bash
# verl's per-rank FSDP files (fixtures/verl/fsdp2-w4, written by torch 2.6
# FSDP2 on 4 ranks) through `import-verl` (native and DCP) and
# `export --to hf --spec names` (ctest): every exported tensor equals torch's
# full state dict (expected/model.pt, read here without torch), optimizer
# state is left out, verl's config.json is copied; a bad --config is exit 2.
#   verl_export_test.sh DISTCKPT FIXTURE
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 fixture=$2
make_work verl-hf
for format in native dcp; do
  "$d" import-verl "$fixture" --dir "$work/$format" --format "$format" >/dev/null
  "$d" export "$work/$format" --to hf "$work/hf-$format" --spec names \
    --config "$fixture/huggingface/config.json" --max-shard-size 2KB
  python3 - "$work/hf-$format" "$fixture" <<'PY'
import json, os, pickle, struct, sys, zipfile
out, fixture = sys.argv[1], sys.argv[2]

# torch.save's zip read without torch: tensors as (dtype, shape, bytes).
DTYPES = {"FloatStorage": ("F32", 4), "BFloat16Storage": ("BF16", 2), "HalfStorage": ("F16", 2),
          "DoubleStorage": ("F64", 8)}
def torch_load(path):
    z = zipfile.ZipFile(path)
    prefix = z.namelist()[0].split("/")[0]
    class Storage:
        def __init__(self, kind, key):
            self.dtype, self.size = DTYPES[kind]
            self.data = z.read(f"{prefix}/data/{key}")
    def rebuild(storage, offset, shape, stride, *rest):
        n = 1
        for s in shape: n *= s
        start = offset * storage.size
        return (storage.dtype, list(shape), storage.data[start:start + n * storage.size])
    class U(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("torch._utils", "_rebuild_tensor_v2"): return rebuild
            if (module, name) == ("collections", "OrderedDict"): return dict
            if module == "torch" and name in DTYPES: return name
            raise pickle.UnpicklingError(f"{module}.{name}")
        def persistent_load(self, pid):
            return Storage(pid[1], pid[2])
    return U(z.open(f"{prefix}/data.pkl")).load()

expected = torch_load(os.path.join(fixture, "expected", "model.pt"))
index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
got = {}
for f in set(index["weight_map"].values()):
    raw = open(os.path.join(out, f), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for name, e in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__": continue
        a, b = e["data_offsets"]
        got[name] = (e["dtype"], e["shape"], raw[8 + n + a:8 + n + b])
assert set(got) == set(expected), (sorted(got), sorted(expected))
for key, e in expected.items():
    assert got[key] == e, key
assert not any(k.startswith("optimizer.") for k in index["weight_map"])
assert json.load(open(os.path.join(out, "config.json"))) == \
    json.load(open(os.path.join(fixture, "huggingface", "config.json")))
print(f"{len(got)} tensors in {len(set(index['weight_map'].values()))} files equal torch's full state dict")
PY
done
echo '[1, 2]' > "$work/bad.json"
rc=0
"$d" export "$work/native" --to hf "$work/hf-bad" --spec names --config "$work/bad.json" \
  2>"$work/err" || rc=$?
[ $rc -eq 2 ] && grep -q "bad.json: not a JSON object" "$work/err" \
  || { echo "bad --config: exit $rc, $(cat "$work/err")"; exit 1; }
echo "verl export ok"
