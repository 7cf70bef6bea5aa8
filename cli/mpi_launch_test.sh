#!/usr/bin/env bash
# ctest cli_mpi_launch (label mpi): `save|load|reshard --backend mpi` started
# outside mpirun run themselves under `mpirun -np <world of --topology>`:
# each says so on stderr, the job's exit code comes back (0 for a save and a
# resharded load, 2 for a topology the state cannot take), and inside a job
# (mpirun started by hand) nothing is launched again.
#   cli/mpi_launch_test.sh DISTCKPT SCENARIO
set -euo pipefail
d=$1 scenario=$2
command -v mpirun >/dev/null || { echo "SKIPPED: no mpirun"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/out"; exit 1; }
run() {  # run RC CMD...
  local want=$1; shift
  set +e; "$@" >"$work/out" 2>&1; local rc=$?; set -e
  [ $rc = "$want" ] || fail "exit $rc (want $want): $*"
}
run 0 "$d" save "$scenario" --topology tp=2,pp=2 --dir "$work/ck" --backend mpi
grep -q "starting 4 ranks" "$work/out" || fail "save did not launch 4 ranks"
run 0 "$d" load "$scenario" --topology tp=4 --dir "$work/ck" --backend mpi
grep -q "starting 4 ranks" "$work/out" || fail "load did not launch"
grep -q "rank 3:" "$work/out" || fail "load: no rank 3 in the job's output"
run 2 "$d" load "$scenario" --topology tp=5 --dir "$work/ck" --backend mpi
grep -q "not divisible" "$work/out" || fail "tp=5: not the divisibility refusal"
run 0 "$d" reshard "$work/ck" --spec "$scenario" -t tp=1,pp=2 --out "$work/r" --backend mpi
grep -q "starting 2 ranks" "$work/out" || fail "reshard did not launch 2 ranks"
run 0 "$d" inspect "$work/r" --check
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
run 0 mpirun --oversubscribe "${root[@]}" -np 4 "$d" load "$scenario" --topology tp=2,dp=2 \
  --dir "$work/ck" --backend mpi
grep -q "starting" "$work/out" && fail "a rank inside mpirun launched again"
echo "ok"
