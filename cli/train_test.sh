#!/usr/bin/env bash
# distckpt train / manage (ctest): Megatron and verl layouts, sync and async
# saves, keep_last 2, resume under another topology with every element
# checked, an explicit iteration and path, refused contents, and (with
# mpirun) the same under Open MPI ranks. The last step is saved too.
#   train_test.sh DISTCKPT SCENARIO [mpi]
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 scenario=$2 mode=${3:-threads}
make_work train
expect() {  # expect PATTERN FILE
  grep -qE "$1" "$2" || { echo "expected /$1/ in:"; cat "$2"; exit 1; }
}
run() {
  if [ "$mode" = mpi ]; then
    local topo=$1; shift
    local w=1; IFS=, read -ra kv <<<"$topo"; for x in "${kv[@]}"; do w=$((w * ${x#*=})); done
    mpirun --oversubscribe --allow-run-as-root -np "$w" "$d" train "$scenario" --topology "$topo" --backend mpi "$@"
  else
    local topo=$1; shift
    "$d" train "$scenario" --topology "$topo" "$@"
  fi
}
for layout in megatron verl; do
  for async in "" --async; do
    root=$work/$layout$async
    run tp=2,pp=2 --dir "$root" --layout $layout --steps 9 --save-interval 2 --keep 2 $async \
      --components actor,critic > "$work/out"
    # Every 2 steps and the last one (9), as Megatron saves at the end of training.
    expect "committed: 2 4 6 8 9$" "$work/out"
    "$d" manage list "$root" --layout $layout > "$work/list"
    expect "^tracker: 9$" "$work/list"
    [ "$(grep -c complete "$work/list")" = 2 ] || { cat "$work/list"; exit 1; }
    expect " 8  complete" "$work/list"
    expect " 9  complete" "$work/list"
    if [ $layout = verl ]; then
      test -f "$root/global_step_8/actor/metadata.json"
      test -f "$root/global_step_8/critic/metadata.json"
    else
      test -f "$root/iter_0000008/metadata.json"
    fi
    # Resume under another topology: every element checked, training continues.
    run dp=2 --dir "$root" --layout $layout --steps 12 --save-interval 2 --keep 2 --resume auto \
      $async --components actor,critic > "$work/out"
    expect "^resumed iteration 9 .*saved under tp=2,pp=2.* elements checked" "$work/out"
    expect "committed 12" "$work/out"
    "$d" manage list "$root" --layout $layout > "$work/list"
    expect "^tracker: 12$" "$work/list"
    [ "$(grep -c complete "$work/list")" = 2 ] || { cat "$work/list"; exit 1; }
  done
done
root=$work/megatron
# An older iteration by number and by path; a content that was not saved.
run tp=2 --dir "$root" --steps 0 --resume 10 > "$work/out"
expect "^resumed iteration 10 " "$work/out"
run tp=1 --dir "$root" --steps 0 --resume "$root/iter_0000012" > "$work/out"
expect "^resumed iteration 12 " "$work/out"
"$d" train "$scenario" --topology tp=1 --dir "$work/nooptim" --steps 2 --save-contents model,extra >/dev/null
set +e
"$d" train "$scenario" --topology tp=1 --dir "$work/nooptim" --steps 2 --resume auto > "$work/out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || { echo "loading a content that was not saved: exit $rc"; cat "$work/out"; exit 1; }
expect "content 'optimizer' was not saved" "$work/out"
"$d" train "$scenario" --topology tp=1 --dir "$work/nooptim" --steps 4 --resume auto \
  --load-contents model,extra --save-contents model,extra > "$work/out"
expect "^resumed iteration 2 " "$work/out"
# A damaged tracker is an input error naming it.
echo garbage > "$work/nooptim/latest_checkpointed_iteration.txt"
set +e
"$d" train "$scenario" --topology tp=1 --dir "$work/nooptim" --steps 4 --resume auto > "$work/out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || { echo "damaged tracker: exit $rc"; exit 1; }
expect "latest_checkpointed_iteration.txt" "$work/out"
# A root another tool wrote (a DCP checkpoint in iter_0000005 without distckpt's manifest, as
# Megatron's own save leaves it, and a tracker): listed as complete, never destroyed.
f=$work/foreign
"$d" save "$scenario" --topology tp=2 --dir "$f/iter_0000005" --format dcp >/dev/null
echo 5 > "$f/latest_checkpointed_iteration.txt"
sums() { (cd "$f" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(sums)
"$d" manage list "$f" > "$work/list"
expect "^ +5  complete +.*iter_0000005 \\(dcp checkpoint not written by distckpt\\)" "$work/list"
set +e
"$d" train "$scenario" --topology tp=1 --dir "$f" --steps 4 > "$work/out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || { echo "train without --resume into a held root: exit $rc"; cat "$work/out"; exit 1; }
expect "already holds tracker 5, .*iter_0000005 \\(complete, not written by distckpt\\)" "$work/out"
"$d" manage prune "$f" --keep 1 > "$work/out"
[ "$(sums)" = "$before" ] || { echo "the foreign root changed"; exit 1; }
echo "train ($mode): ok"
