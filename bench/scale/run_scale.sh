#!/usr/bin/env bash
# Scale by simulation (issue 18): bench/scale at 1k -> 16k ranks for the
# Llama-3-405B-shaped GPT with the distributed optimizer (dp_reshardable,
# fully_sharded_model_space) and a MoE variant; one process per point (so the
# peak RSS is that point's). Writes bench/scale/scale.json and, when
# matplotlib is present, bench/scale/scale.png (plot_scale.py).
#   bench/scale/run_scale.sh [BUILD_DIR]      (needs BUILD_DIR/bench/scale)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
exe=$build/bench/scale
[ -x "$exe" ] || { echo "run_scale.sh: $exe not built (ci/build scale_sim)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/distckpt-scale-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
points=()
for world in 1024 2048 4096 8192 16384; do
  for config in "dp_reshardable" "fully_sharded_model_space" "fully_sharded_model_space --moe"; do
    out=$tmp/$world-${config// /}.json
    "$exe" --world "$world" --optimizer $config --json "$out" 2>/dev/null
    points+=("$out")
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); ps=j['plans']; \
plan=' / '.join('refused' if 'refused' in p else f\"{p['plan_s']*1e3:.1f} (cpu {p['plan_cpu_s']*1e3:.1f})\" for p in ps); \
print(f\"{j['world']:>6} {j['model']:<14} {j['optimizer']:<26} validate {j['validate_s']:.3f} s  commit {j['commit_s']:.3f} s  \
metadata {j['metadata_bytes']/1e6:.1f} MB ({j['metadata_bytes_per_chunk']:.0f} B/chunk, {j['chunks']} chunks)  \
plan ms rank 0 / last {plan}  peak {j['peak_rss_mb']:.0f} MB  load {j['load_average']}\")" "$out"
  done
done
python3 -c "import json,sys; json.dump([json.load(open(f)) for f in sys.argv[2:]], open(sys.argv[1],'w'), indent=1)" \
  "$here/scale.json" "${points[@]}"
echo "wrote $here/scale.json"
for py in python3 /usr/bin/python3 none; do
  if [ $py = none ]; then echo "matplotlib not installed: no plot (apt-get install python3-matplotlib)"; break; fi
  if $py -c 'import matplotlib' 2>/dev/null; then
    $py "$here/plot_scale.py" "$here/scale.json" "$here/scale.png"; break
  fi
done
