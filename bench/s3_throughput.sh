#!/usr/bin/env bash
# Save and load throughput to an S3 store against raw PUT/GET of the same
# bytes (curl, same parallelism as the S3 Env), in one run. Run under
# ci/with-s3-gateway (ci/bench does), or with the AWS_* environment of any store.
#   bench/s3_throughput.sh DISTCKPT [OUT.json]
# Prints one line per figure and writes them as JSON to OUT.json; with
# DISTCKPT_S3_GATE=1, exits 1 when save < 0.4x raw PUT or load < 0.12x raw GET.
set -euo pipefail
d=$1 out=${2:-}
: "${AWS_ENDPOINT_URL:?run under ci/with-s3-gateway}" "${DISTCKPT_S3_BUCKET:?}"
parallel=${DISTCKPT_S3_PARALLEL:-4}
work=$(mktemp -d /tmp/distckpt-s3bench-XXXXXX)
root="s3://$DISTCKPT_S3_BUCKET/bench-$$-$RANDOM"
# The run's objects go at exit: left behind, a few runs fill ci/s3-gateway's
# memstore OSD (3 GiB), and a full OSD stalls every write.
cleanup() {
  local prefix=${root#s3://*/}/ key
  for key in $(s3curl "$AWS_ENDPOINT_URL/$DISTCKPT_S3_BUCKET?list-type=2&prefix=${prefix//\//%2F}" |
    grep -o '<Key>[^<]*</Key>' | sed -e 's/<Key>//' -e 's/<\/Key>//'); do
    s3curl -X DELETE -o /dev/null "$AWS_ENDPOINT_URL/$DISTCKPT_S3_BUCKET/$key" || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# ~230 MB of f32: a GPT of 8 layers, hidden 512, vocab 32000; two ranks (tp=2).
cat >"$work/s3-bench.json" <<'EOF'
{"name": "s3-bench", "seed": 1,
 "model": {"kind": "gpt", "layers": 8, "hidden": 512, "ffn": 2048, "heads": 8, "vocab": 32000,
           "dtype": "f32", "glu": false, "tied": false},
 "topologies": ["tp=2", "tp=1"]}
EOF
s3curl() {
  curl -sf -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$@"
}
export -f s3curl
now() { date +%s.%N; }
"$d" save "$work/s3-bench.json" --topology tp=2 --dir "$work/local" >"$work/local-save.out"
"$d" load "$work/s3-bench.json" --topology tp=2 --dir "$work/local" >"$work/local-load.out"
bytes=$(du -cb "$work"/local/* | tail -1 | cut -f1)
files=$(ls "$work/local" | wc -l)

t0=$(now)
"$d" save "$work/s3-bench.json" --topology tp=2 --dir "$root/ckpt" >"$work/save.out" 2>"$work/save.err"
t1=$(now)
(cd "$work/local" && ls | xargs -P "$parallel" -I{} bash -c \
  "s3curl -o /dev/null -T '{}' '$AWS_ENDPOINT_URL/$DISTCKPT_S3_BUCKET/${root#s3://*/}/raw/{}'")
t2=$(now)
"$d" load "$work/s3-bench.json" --topology tp=2 --dir "$root/ckpt" >"$work/load.out" 2>"$work/load.err"
t3=$(now)
(cd "$work/local" && ls | xargs -P "$parallel" -I{} bash -c \
  "s3curl -o /dev/null '$AWS_ENDPOINT_URL/$DISTCKPT_S3_BUCKET/${root#s3://*/}/raw/{}'")
t4=$(now)
python3 - "$bytes" "$files" "$t0" "$t1" "$t2" "$t3" "$t4" "$out" "$work" <<'EOF'
import json, re, sys
b, files = int(sys.argv[1]), int(sys.argv[2])
t0, t1, t2, t3, t4 = map(float, sys.argv[3:8])
w = sys.argv[9]
def seconds(name, pattern):  # the command's own timing (the save or load, not the process)
    return float(re.search(pattern, open(f"{w}/{name}.out").read()).group(1))
save_pat, load_pat = r"bytes written in ([0-9.]+) s", r"partially read [0-9]+, ([0-9.]+) s"
mb = b / 1e6
r = {"bytes": b, "files": files,
     "save_s": seconds("save", save_pat), "raw_put_s": t2 - t1,
     "load_s": seconds("load", load_pat), "raw_get_s": t4 - t3,
     "save_process_s": t1 - t0, "load_process_s": t3 - t2,
     "local_save_s": seconds("local-save", save_pat), "local_load_s": seconds("local-load", load_pat)}
r["save_MBps"] = mb / r["save_s"]; r["raw_put_MBps"] = mb / r["raw_put_s"]
r["load_MBps"] = mb / r["load_s"]; r["raw_get_MBps"] = mb / r["raw_get_s"]
r["save_vs_raw_put"] = r["save_MBps"] / r["raw_put_MBps"]
r["load_vs_raw_get"] = r["load_MBps"] / r["raw_get_MBps"]
for name in ("save", "load"):
    r[name + "_traffic"] = open(f"{w}/{name}.err").read().strip().splitlines()[-1:]
print(f"s3 throughput ({b} bytes in {files} files; the commands' own save/load times, "
      f"raw: curl, {files} files, in parallel):")
print(f"  save {r['save_MBps']:.1f} MB/s vs raw PUT {r['raw_put_MBps']:.1f} MB/s: {r['save_vs_raw_put']:.2f}x")
print(f"  load {r['load_MBps']:.1f} MB/s vs raw GET {r['raw_get_MBps']:.1f} MB/s: {r['load_vs_raw_get']:.2f}x")
print(f"  same commands on local disk: save {mb / r['local_save_s']:.1f} MB/s, load {mb / r['local_load_s']:.1f} MB/s; "
      f"whole processes to s3: save {r['save_process_s']:.1f} s, load {r['load_process_s']:.1f} s")
print(f"  save: {r['save_traffic']}; load: {r['load_traffic']}")
if sys.argv[8]:
    json.dump(r, open(sys.argv[8], "w"), indent=1)
import os
if os.environ.get("DISTCKPT_S3_GATE"):
    ok = r["save_vs_raw_put"] >= 0.4 and r["load_vs_raw_get"] >= 0.12
    print(f"  gate: save/raw PUT {r['save_vs_raw_put']:.2f} (>= 0.4), load/raw GET "
          f"{r['load_vs_raw_get']:.2f} (>= 0.12): {'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)
EOF
