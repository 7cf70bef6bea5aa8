#!/usr/bin/env bash
# train --upload: each committed checkpoint copied to a remote root (a local
# path, or s3:// under ci/with-s3-gateway), retention in both places, resume
# from the remote root when the local one is lost, one writer per remote
# root, another tool's files never replaced, a kill at each upload phase, and
# SIGTERM (sync and async) saving, uploading and exiting 0.
#   upload_test.sh DISTCKPT SCENARIO local|s3
set -uo pipefail
d=$1 scenario=$2 kind=$3
work=$(mktemp -d /tmp/distckpt-upload-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
if [ "$kind" = s3 ]; then
  : "${AWS_ENDPOINT_URL:?run under ci/with-s3-gateway}" "${DISTCKPT_S3_BUCKET:?}"
  remote="s3://$DISTCKPT_S3_BUCKET/upload-$$-$RANDOM"
else
  remote="$work/remote"
fi
. "$(dirname "$0")/../ci/lib/testlib.sh"
tracker_of() { # the tracker `manage list` reports for a root (exit 0: it names a complete one)
  "$d" manage list "$1" >"$work/list" 2>&1 || { cat "$work/list"; fail "manage list $1"; }
  sed -n 's/^tracker: //p' "$work/list"
}
complete_of() { # the complete iterations of a root, space-separated
  "$d" manage list "$1" 2>/dev/null | awk '$2 == "complete" {printf "%d ", $1}'
}
train() { # train ARGS... (tp=2 unless ARGS name a --topology)
  local topo=(--topology tp=2)
  [[ " $* " == *" --topology "* ]] && topo=()
  "$d" train "$scenario" "${topo[@]}" "$@"
}

# 1. A run uploads every commit; --keep 2 in both places.
ok train --dir "$work/a" --upload "$remote/run" --steps 7 --save-interval 2 --keep 2
grep -q "^uploaded to $remote/run: 2 4 6 7$" "$work/out" || { cat "$work/out"; fail "uploads not reported"; }
[ "$(tracker_of "$remote/run")" = 7 ] || fail "remote tracker $(tracker_of "$remote/run"), want 7"
[ "$(complete_of "$remote/run")" = "6 7 " ] || fail "remote keeps '$(complete_of "$remote/run")', want 6 7"
[ "$(complete_of "$work/a")" = "6 7 " ] || fail "local keeps '$(complete_of "$work/a")', want 6 7"
ok "$d" verify "$remote/run/iter_0000007" --spec "$scenario" --topology tp=1 --data

# 2. The local root lost: --resume auto reads the remote root's newest (under
# another topology, every element checked), and the run goes on uploading.
rm -rf "$work/a"
ok train --dir "$work/a" --upload "$remote/run" --steps 9 --save-interval 2 --keep 2 --resume auto \
  --topology dp=2
grep -q "^resumed iteration 7 from $remote/run/iter_0000007" "$work/out" ||
  { cat "$work/out"; fail "did not resume the remote iteration 7"; }
[ "$(tracker_of "$remote/run")" = 9 ] || fail "remote tracker after the resumed run: $(tracker_of "$remote/run")"
# The local root newer than the remote one: the local one is resumed.
ok train --dir "$work/a" --steps 11 --save-interval 2 --resume auto --topology dp=2
ok train --dir "$work/a" --upload "$remote/run" --steps 11 --resume auto
grep -q "^resumed iteration 11 from $work/a/iter_0000011" "$work/out" ||
  { cat "$work/out"; fail "did not resume the newer local iteration 11"; }

# 3. A fresh run into a remote root holding checkpoints is refused; so is
# train --dir s3:// (no locks, no rename: save locally and upload).
refused "already holds tracker 9.*another --upload" train --dir "$work/b" --upload "$remote/run" --steps 2
if [ "$kind" = s3 ]; then
  refused "save locally and upload each checkpoint: --dir LOCAL --upload" \
    train --dir "$remote/direct" --steps 2
fi

# 4. One writer per remote root: a second run is refused naming the first.
"$d" train "$scenario" --dir "$work/c" --upload "$remote/held" --steps 400 --step-ms 20 --save-interval 100 \
  >"$work/first" 2>&1 &
first=$!
for _ in $(seq 100); do grep -q "^saving 100" "$work/first" && break; sleep 0.1; done
refused "is held by another writer.*pid $first on host" \
  train --dir "$work/d" --upload "$remote/held" --steps 2 --resume auto
wait $first || { cat "$work/first"; fail "the first writer failed"; }

# 5. Another tool's iteration in the remote root is never replaced: the
# upload of that iteration is refused (the run exits 2 saying so) and the
# files stay as they were.
ok "$d" save "$scenario" --topology tp=1 --dir "$remote/foreign/iter_0000004"
refused "iteration 4 was committed in .* but not uploaded.*distckpt did not write" \
  train --dir "$work/e" --upload "$remote/foreign" --steps 4 --save-interval 2 --resume auto
ok "$d" verify "$remote/foreign/iter_0000004" --spec "$scenario" --topology tp=1 --data

# 6. Killed at each upload phase (of the 2nd upload): the remote tracker names
# the last complete upload, and a resumed run clears what the cut one left.
# (tp=2 writes 2 data files: upload-data:3 is the 2nd upload's first.)
for phase in upload upload-data upload-metadata upload-manifest upload-tracker uploaded \
  upload-delete upload-delete-unlinked; do
  r="$remote/kill-$phase"
  n=2
  [ $phase = upload-data ] && n=3
  DISTCKPT_CRASH_AT=$phase:$n train --dir "$work/k-$phase" --upload "$r" --steps 8 --save-interval 2 \
    --keep 1 --step-ms 30 >"$work/out" 2>&1
  rc=$?
  [ $rc = 137 ] || { cat "$work/out"; fail "$phase: exit $rc, want 137 (killed)"; }
  t=$(tracker_of "$r")
  case "$phase:$t" in
    upload:2 | upload-data:2 | upload-metadata:2 | upload-manifest:2 | upload-tracker:2) ;;
    uploaded:4 | upload-delete:4 | upload-delete-unlinked:4 | upload-delete:6 | upload-delete-unlinked:6) ;;
    *) cat "$work/out"; fail "$phase: remote tracker '$t' after the kill" ;;
  esac
  ok train --dir "$work/k-$phase" --upload "$r" --steps 10 --save-interval 2 --keep 1 --resume auto \
    --topology tp=1
  [ "$(tracker_of "$r")" = 10 ] || fail "$phase: remote tracker $(tracker_of "$r") after the resumed run"
  [ "$(complete_of "$r")" = "10 " ] || fail "$phase: remote keeps '$(complete_of "$r")', want 10"
  echo "killed at $phase: remote tracker $t, resumed to 10"
done

# 7. SIGTERM while a run uploads (sync and async): the step reached is saved,
# uploaded, exit 0, and a run on another machine resumes it from the remote root.
for mode in sync async; do
  extra=()
  [ $mode = async ] && extra=(--async)
  "$d" train "$scenario" --topology tp=2 --dir "$work/s-$mode" --upload "$remote/sig-$mode" --steps 100000 --step-ms 20 \
    --save-interval 25 --save-on-signal SIGTERM "${extra[@]}" >"$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "^uploaded 25 " "$work/out" && break; sleep 0.1; done
  sleep 0.$((RANDOM % 9 + 1))
  kill -TERM $pid
  wait $pid
  rc=$?
  [ $rc = 0 ] || { cat "$work/out"; fail "$mode: exit $rc after SIGTERM"; }
  step=$(sed -nE 's/^stopped at step ([0-9]+) on signal SIGTERM.*/\1/p' "$work/out")
  [ -n "$step" ] || { cat "$work/out"; fail "$mode: no stop reported"; }
  grep -qE "^uploaded to $remote/sig-$mode: .*\b$step$" "$work/out" ||
    { cat "$work/out"; fail "$mode: step $step not uploaded"; }
  [ "$(tracker_of "$remote/sig-$mode")" = "$step" ] || fail "$mode: remote tracker is not $step"
  ok train --dir "$work/s2-$mode" --upload "$remote/sig-$mode" --steps "$step" --resume auto --topology tp=1
  grep -q "^resumed iteration $step from $remote/sig-$mode/" "$work/out" ||
    { cat "$work/out"; fail "$mode: did not resume $step from the remote root"; }
  echo "SIGTERM ($mode): saved, uploaded and resumed step $step"
done
echo "train --upload ($kind): ok"
