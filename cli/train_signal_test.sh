#!/usr/bin/env bash
# distckpt train's "when" (issue 38, ctest): the last step saved; SIGTERM /
# SIGUSR1 at random moments with --save-on-signal (sync and async saves):
# exit 0, a committed checkpoint at the step reached, resumed from it with
# every element checked; non-persistent checkpoints (ROOT/non_persistent/,
# only the newest kept, resumed when newer); one writer per root (a second
# train refused naming the holder, concurrent starts never leave the tracker
# on an incomplete checkpoint). With "mpi": the signal goes to ONE rank's
# process only, and every rank must stop at the same step.
#   train_signal_test.sh DISTCKPT SCENARIO [threads|mpi] [TRIALS]
set -uo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 scenario=$2 mode=${3:-threads} trials=${4:-6}
make_work signal
expect() {  # expect PATTERN FILE
  grep -qE "$1" "$2" || { echo "expected /$1/ in:"; cat "$2"; exit 1; }
}
mpirun_cmd=(mpirun --oversubscribe --allow-run-as-root -np)
train() {  # train TOPOLOGY WORLD ARGS... (threads or mpi, by $mode)
  local topo=$1 world=$2; shift 2
  if [ "$mode" = mpi ]; then
    "${mpirun_cmd[@]}" "$world" "$d" train "$scenario" --topology "$topo" --backend mpi "$@"
  else
    "$d" train "$scenario" --topology "$topo" "$@"
  fi
}
launch() {  # as train, to be started with & : the job's pid is distckpt's (or mpirun's)
  local topo=$1 world=$2; shift 2
  if [ "$mode" = mpi ]; then
    exec "${mpirun_cmd[@]}" "$world" "$d" train "$scenario" --topology "$topo" --backend mpi "$@"
  fi
  exec "$d" train "$scenario" --topology "$topo" "$@"
}
tracker_of() { "$d" manage list "$1" | sed -n 's/^tracker: //p'; }

# 1. The last step is saved (7 is not a multiple of 2).
r=$work/last
train tp=2 2 --dir "$r" --steps 7 --save-interval 2 > "$work/out" || fail "last-step run"
expect "committed: 2 4 6 7$" "$work/out"
[ "$(tracker_of "$r")" = 7 ] || fail "tracker $(tracker_of "$r") after --steps 7"

# 2. Signals at random moments: save at the step reached, finalize, exit 0, resume from it.
RANDOM=$((38 + ${#mode}))
stopped=0
for ((i = 0; i < trials; i++)); do
  for async in "" --async; do
    r=$work/sig$i$async
    sig=TERM; (( RANDOM % 2 )) && sig=USR1
    launch tp=2 2 --dir "$r" --steps 100000 --save-interval 40 --step-ms 4 --keep 2 $async \
      --save-on-signal SIGTERM,SIGUSR1 > "$work/run.log" 2>&1 &
    pid=$!
    # From the moment the run holds its root (the handler is installed before): any time.
    for _ in $(seq 200); do [ -f "$r/distckpt_writer.lock" ] && break; sleep 0.05; done
    sleep "$((RANDOM % 2)).$(printf '%03d' $((RANDOM % 1000)))"
    if [ "$mode" = mpi ]; then
      # One rank's process only (its parent is mpirun): the others learn it at the next step.
      ranks=($(pgrep -P $pid -x distckpt))
      [ ${#ranks[@]} = 2 ] || { sleep 1; ranks=($(pgrep -P $pid -x distckpt)); }
      [ ${#ranks[@]} -ge 1 ] || fail "trial $i: no rank process found"
      kill -$sig "${ranks[RANDOM % ${#ranks[@]}]}"
    else
      kill -$sig $pid
    fi
    wait $pid
    rc=$?
    [ $rc = 0 ] || { cat "$work/run.log"; fail "trial $i ($sig${async:+ async}): exit $rc after the signal"; }
    step=$(sed -n 's/^stopped at step \([0-9]*\) on signal.*/\1/p' "$work/run.log")
    [ -n "$step" ] || { cat "$work/run.log"; fail "trial $i: no 'stopped at step' line"; }
    [ "$(tracker_of "$r")" = "$step" ] || fail "trial $i: tracker $(tracker_of "$r") but stopped at $step"
    "$d" manage list "$r" > "$work/list" || fail "trial $i: tracker names an incomplete checkpoint"
    train dp=2 2 --dir "$r" --steps 0 --resume auto > "$work/resume.log" 2>&1 ||
      { cat "$work/resume.log"; fail "trial $i: resume failed"; }
    expect "^resumed iteration $step .* elements checked" "$work/resume.log"
    stopped=$((stopped + 1))
    echo "trial $i: SIG$sig${async:+ (async)} -> saved and resumed step $step"
  done
done

# 3. Non-persistent checkpoints: killed (-9) as the save of 8 starts, after the
#    non-persistent 6 committed, the persistent tracker on 4: resume auto takes 6; only the
#    newest non-persistent kept.
r=$work/np
DISTCKPT_CRASH_AT=save:4:0 train tp=2 2 --dir "$r" --steps 100 --save-interval 4 \
  --non-persistent-save-interval 3 --step-ms 5 > "$work/np.log" 2>&1
expect "^crash point save \(iteration 8\)" "$work/np.log"
[ "$(tracker_of "$r")" = 4 ] || fail "persistent tracker $(tracker_of "$r"), expected 4"
[ "$(tr -d '\n' < "$r/non_persistent/latest_checkpointed_iteration.txt")" = 6 ] ||
  fail "non-persistent tracker: $(cat "$r/non_persistent/latest_checkpointed_iteration.txt")"
ls "$r/non_persistent" | grep -q '^iter_0000003$' && fail "non-persistent iteration 3 kept"
train tp=1 1 --dir "$r" --steps 9 --save-interval 4 --non-persistent-save-interval 3 \
  --resume auto > "$work/np.log" 2>&1 || { cat "$work/np.log"; fail "non-persistent resume"; }
expect "^resumed iteration 6 .*non_persistent/iter_0000006 .* elements checked" "$work/np.log"
# 8 (persistent), 9 (the last step: persistent too).
expect "committed: 8 9$" "$work/np.log"
[ "$(tracker_of "$r")" = 9 ] || fail "tracker $(tracker_of "$r") after the resumed run"
train tp=1 1 --dir "$r" --steps 9 --resume auto > "$work/np.log" 2>&1 || fail "resume 9"
expect "^resumed iteration 9 from [^ ]*/iter_0000009 " "$work/np.log"

# 4. One writer per root: a second train is refused at start naming the holder.
r=$work/busy
launch tp=1 1 --dir "$r" --steps 100000 --save-interval 50 --step-ms 5 \
  --save-on-signal SIGTERM > "$work/first.log" 2>&1 &
first=$!
for _ in $(seq 50); do [ -f "$r/distckpt_writer.lock" ] && break; sleep 0.1; done
sleep 0.3
"$d" train "$scenario" --topology tp=1 --dir "$r" --steps 10 --resume auto > "$work/second.log" 2>&1
rc=$?
[ $rc = 2 ] || { cat "$work/second.log"; fail "second writer: exit $rc"; }
expect "is being written by another run \(pid [0-9]+ on host .*distckpt_writer.lock" "$work/second.log"
if [ "$mode" = mpi ]; then pkill -TERM -P $first -x distckpt
else kill -TERM $first; fi
wait $first || { cat "$work/first.log"; fail "the first writer did not stop cleanly"; }
# Concurrent starts on one root (the race that once left the tracker on an
# incomplete checkpoint): whoever runs, the tracker names a complete one.
for ((i = 0; i < 4; i++)); do
  train tp=1 1 --dir "$r" --steps $((10 * (i + 1) + 300)) --save-interval 1 --resume auto > "$work/a.log" 2>&1 &
  a=$!
  train tp=1 1 --dir "$r" --steps $((10 * (i + 1) + 300)) --save-interval 1 --resume auto > "$work/b.log" 2>&1 &
  b=$!
  wait $a; ra=$?; wait $b; rb=$?
  (( ra == 0 || rb == 0 )) || { cat "$work/a.log" "$work/b.log"; fail "race $i: neither ran"; }
  for log in "$work/a.log" "$work/b.log"; do
    if ! grep -q "^trained " "$log"; then expect "being written by another run|held by another writer" "$log"; fi
  done
  "$d" manage list "$r" > "$work/list" || { cat "$work/list"; fail "race $i: tracker on an incomplete checkpoint"; }
done
echo "train signals ($mode): $stopped signal stops saved and resumed; non-persistent and one-writer ok"
