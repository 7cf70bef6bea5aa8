#!/usr/bin/env bash
# s3:// paths through every checkpoint command against a real S3 server (the
# gateway of ci/s3-gateway; run under ci/with-s3-gateway, ctest label s3):
# save/load/verify/reshard/diff/inspect/dump with threads and MPI, the commit
# contract of an object store (no metadata: incomplete; overwrite refused),
# and a resharded load whose bytes and requests are stated and checked.
#   s3_test.sh DISTCKPT SCENARIO [mpi]
set -uo pipefail
d=$1 scenario=$2 mpi=${3:-}
: "${AWS_ENDPOINT_URL:?run under ci/with-s3-gateway}" "${DISTCKPT_S3_BUCKET:?}"
root="s3://$DISTCKPT_S3_BUCKET/cli-$$-$RANDOM"
work=$(mktemp -d /tmp/distckpt-s3-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../ci/lib/testlib.sh"
# The object store, raw (curl signs as the Env does): s3 GET|DELETE KEY
s3() {
  curl -sf -X "$1" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$AWS_ENDPOINT_URL/$DISTCKPT_S3_BUCKET/$2"
}
key() { echo "${1#s3://$DISTCKPT_S3_BUCKET/}"; }
traffic() { # the "s3 traffic:" lines of $work/err (one a process, each MPI rank's), summed:
  # requests reads bytes_read
  sed -nE 's/^s3 traffic: ([0-9]+) requests \(([0-9]+) object reads, [0-9]+ retries\), ([0-9]+) bytes read.*/\1 \2 \3/p' \
    "$work/err" | awk '{r += $1; g += $2; b += $3} END {if (NR) print r, g, b}'
}

backend=()
[ "$mpi" = mpi ] && backend=(--backend mpi)

# save (tp=2), then the same save locally: the two must not differ.
ok "$d" save "$scenario" --topology tp=2,dp=2 "${backend[@]}" --dir "$root/c"
s3 GET "$(key "$root/c")/metadata.json" >/dev/null || fail "no metadata.json object after save"
ok "$d" save "$scenario" --topology tp=2,dp=2 "${backend[@]}" --dir "$work/local"
ok "$d" diff "$root/c" "$work/local"
ok "$d" inspect "$root/c"
grep -q "tensors" "$work/out" || fail "inspect printed no tensors: $(cat "$work/out")"
ok "$d" inspect "$root/c" --json
key0=$(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))["tensors"])[0])' "$work/out") ||
  fail "inspect --json: $(head -c 300 "$work/out")"
ok "$d" dump "$root/c" "$key0" --out "$work/dump.s3"
ok "$d" dump "$work/local" "$key0" --out "$work/dump.local"
cmp -s "$work/dump.s3" "$work/dump.local" || fail "dump of '$key0' differs between s3 and local"

# A resharded load (tp=2,dp=2 -> tp=1,pp=2): payload bytes and requests, stated and bounded.
ok "$d" load "$scenario" --topology tp=1,pp=2 "${backend[@]}" --dir "$root/c"
payload=$(sed -nE 's/.*bytes read ([0-9]+) \(read\/needed.*/\1/p' "$work/out" | head -1)
read -r requests reads wire <<<"$(traffic)"
[ -n "$payload" ] && [ -n "${wire:-}" ] || { cat "$work/out" "$work/err"; fail "load stated no bytes"; }
meta=$(s3 GET "$(key "$root/c")/metadata.json" | wc -c)
echo "resharded load tp=2,dp=2 -> tp=1,pp=2 (${mpi:-threads}): payload $payload bytes; read from s3 $wire bytes in $reads object reads, $requests requests; metadata.json $meta bytes"
# Beyond the payload: each process's metadata reads, block checksums (8
# bytes a block), nothing else.
ranks=1
[ "$mpi" = mpi ] && ranks=2
[ "$wire" -ge "$payload" ] || fail "s3 bytes read $wire < payload $payload"
[ "$wire" -le $((payload + payload / 16 + 4 * ranks * meta + 65536)) ] ||
  fail "s3 bytes read $wire: more than the payload $payload and metadata $meta need"

# verify: metadata only by default, the data with --data.
ok "$d" verify "$root/c" --spec "$scenario" --topology tp=1
read -r _ _ verify_wire <<<"$(traffic)"
[ "${verify_wire:-0}" -le $((4 * meta + 65536)) ] || fail "verify (metadata) read $verify_wire bytes"
ok "$d" verify "$root/c" --spec "$scenario" --topology tp=1 --data
echo "verify: metadata $verify_wire bytes read; verify --data: $(traffic)"

# reshard into another s3 prefix, and diff: equal tensors, another layout.
ok "$d" reshard "$root/c" --out "$root/r" --topology tp=1 --spec "$scenario"
ok "$d" reshard "$work/local" --out "$work/local-r" --topology tp=1 --spec "$scenario"
ok "$d" diff "$root/r" "$work/local-r"

# The object store's commit: an overwrite is refused by name, nothing touched.
refused "s3 storage cannot overwrite the committed checkpoint in $root/c" \
  "$d" save "$scenario" --topology tp=2,dp=2 "${backend[@]}" --dir "$root/c" --overwrite
refused "refusing to save into $root/c" \
  "$d" save "$scenario" --topology tp=2,dp=2 "${backend[@]}" --dir "$root/c"
ok "$d" diff "$root/c" "$work/local"
# Data without metadata is an incomplete checkpoint.
s3 DELETE "$(key "$root/r")/metadata.json" || fail "cannot delete the metadata object"
refused "metadata.json missing|not a distributed checkpoint|no checkpoint" "$d" inspect "$root/r"
# ... and a save into it replaces that debris.
ok "$d" save "$scenario" --topology tp=2,dp=2 "${backend[@]}" --dir "$root/r"
ok "$d" diff "$root/r" "$work/local"
# A missing checkpoint is named.
refused "$root/none" "$d" inspect "$root/none"
echo "s3 paths (${mpi:-threads}): ok"
