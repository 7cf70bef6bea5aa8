#!/usr/bin/env bash
# Checkpoint paths as URIs (io/storage_path.h, issue 38): file:// paths work in
# every command; s3:// without S3 storage in the build or without credentials,
# and unknown schemes, are refused with exit 2 naming the URI, before anything is written.
#   storage_uri_test.sh DISTCKPT SCENARIO
set -uo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 scenario=$2
make_work uri
ok() { "$@" > "$work/out" 2>&1; local rc=$?; [ $rc = 0 ] || { cat "$work/out"; fail "exit $rc from: $*"; }; }
refused() {  # refused PATTERN COMMAND...: exit 2 and PATTERN in the output
  local pattern=$1; shift
  "$@" > "$work/out" 2>&1; local rc=$?
  [ $rc = 2 ] || { cat "$work/out"; fail "exit $rc (want 2) from: $*"; }
  grep -qE "$pattern" "$work/out" || { cat "$work/out"; fail "no /$pattern/ from: $*"; }
}
ok "$d" save "$scenario" --topology tp=2 --dir "file://$work/c"
test -f "$work/c/metadata.json" || fail "file:// save wrote no $work/c/metadata.json"
ok "$d" inspect "file://$work/c"
ok "$d" verify "file://$work/c" --spec "$scenario" --topology tp=1
ok "$d" load "$scenario" --topology tp=1 --dir "file://localhost$work/c"
ok "$d" reshard "file://$work/c" --out "file://$work/c1" --topology tp=1 --spec "$scenario"
ok "$d" diff "file://$work/c" "$work/c"
ok "$d" train "$scenario" --topology tp=1 --dir "file://$work/run" --steps 3 --save-interval 2
ok "$d" manage list "file://$work/run"
grep -q "^tracker: 3$" "$work/out" || fail "file:// train: $(cat "$work/out")"
for cmd in "inspect s3://bucket/prefix/c" "verify s3://bucket/prefix/c" \
           "train $scenario --topology tp=1 --dir s3://bucket/run --steps 2" \
           "manage list s3://bucket/run" "save $scenario --topology tp=1 --dir s3://bucket/c"; do
  # shellcheck disable=SC2086
  # A build without libcurl has no S3 storage; one with it finds no credentials here.
  refused "s3://bucket/[a-z/]*: (S3 storage is not available|s3: no credentials)" \
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE=/nonexistent \
    AWS_CONFIG_FILE=/nonexistent "$d" $cmd
done
refused "unknown storage scheme 'hdfs://'" "$d" inspect hdfs://nn/c
refused "not host 'elsewhere'" "$d" inspect file://elsewhere/c
[ -z "$(ls "$work" | grep -vE '^(c|c1|run|out)(\.lock)?$')" ] || fail "unexpected files: $(ls "$work")"
echo "storage URIs: ok"
