#!/bin/bash
# The save/load strategies through the distckpt CLI (threads backend), on
# scenarios/dp4-replicated.json: async + fully parallel saves equal a plain
# synchronous one (`distckpt diff`), fully parallel and two-stage loads
# check every element (one load strategy at a time), `run --fully-parallel`
# passes its pairs, and a replicated local checkpoint survives the loss of
# one rank's files but not of a whole clique; the same with FSDP's empty
# shards (scenarios/fsdp2-n-to-m.json); the FP8 scenario under the fully
# parallel strategies.
# Usage: cli_strategies_test.sh DISTCKPT SCENARIO_DIR
set -euo pipefail
distckpt=$1
scenario=$2/dp4-replicated.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$distckpt" save "$scenario" -t tp=2,dp=4 -d "$work/sync"
"$distckpt" save "$scenario" -t tp=2,dp=4 -d "$work/async" --async --writers 3 --fully-parallel
"$distckpt" diff "$work/sync" "$work/async"
"$distckpt" load "$scenario" -t tp=4,dp=2 --saved-topology tp=2,dp=4 -d "$work/async" --fully-parallel --exchange gather_rounds
"$distckpt" load "$scenario" -t tp=1,dp=8 --saved-topology tp=2,dp=4 -d "$work/async" --two-stage
# One load strategy at a time: both together are a usage error.
status=0
"$distckpt" load "$scenario" -t tp=1,dp=8 --saved-topology tp=2,dp=4 -d "$work/async" \
  --fully-parallel --two-stage 2> "$work/err" || status=$?
if [ "$status" -ne 2 ] || ! grep -q "excludes" "$work/err"; then
  echo "FAIL: --fully-parallel --two-stage was not refused as a usage error (exit $status)" >&2
  exit 1
fi
# `run --fully-parallel`: the scenario's pairs, every save and load fully parallel.
"$distckpt" run "$scenario" --fully-parallel --work-dir "$work/run" > "$work/out"
grep -q "fully parallel" "$work/out"
grep -q "pairs: 2 passed, 0 failed" "$work/out"

"$distckpt" save "$scenario" -t tp=2,dp=4 --local "$work/local" --replication 2,2
rm -rf "$work/local/3"
"$distckpt" load "$scenario" -t tp=2,dp=4 --local "$work/local" --replication 2,2
rm -rf "$work/local/1"  # rank 3's clique {1, 3} has no copy left
if "$distckpt" load "$scenario" -t tp=2,dp=4 --local "$work/local" --replication 2,2 2> "$work/err"; then
  echo "FAIL: a local checkpoint without any copy of rank 1's files loaded" >&2
  exit 1
fi
grep -q "no replicas available for rank 1" "$work/err"
# Megatron test_fp8_save_load with the fully parallel strategies (use_fpsl,
# both exchange algorithms), and a DP group of 4 so that shards are exchanged.
fp8=$2/megatron-fp8.json
"$distckpt" save "$fp8" -t tp=2,pp=4 -d "$work/fp8" --fully-parallel
"$distckpt" load "$fp8" -t tp=2,pp=4 -d "$work/fp8" --fully-parallel --exchange broadcast
"$distckpt" load "$fp8" -t tp=2,pp=4 -d "$work/fp8" --fully-parallel --exchange gather_rounds
"$distckpt" save "$fp8" -t tp=2,dp=4 -d "$work/fp8dp" --fully-parallel
"$distckpt" load "$fp8" -t tp=1,dp=8 -d "$work/fp8dp" --fully-parallel --exchange gather_rounds > "$work/out"
grep -q "fp8 'all_codes': 16 values saturated" "$work/out"
# FSDP ranks without rows hold empty shards whose ShardId (key, offset) is a
# non-empty shard's: a fully parallel save must not let them "write" it, a
# fully parallel or two-stage load must not wait for data for them.
fsdp=$2/fsdp2-n-to-m.json
"$distckpt" save "$fsdp" -t dp=8 -d "$work/fsdp-sync"
"$distckpt" save "$fsdp" -t dp=8 -d "$work/fsdp-fp" --fully-parallel
"$distckpt" diff "$work/fsdp-sync" "$work/fsdp-fp"
"$distckpt" load "$fsdp" -t dp=5 --saved-topology dp=8 -d "$work/fsdp-fp"
"$distckpt" load "$fsdp" -t dp=8 --saved-topology dp=8 -d "$work/fsdp-fp" --fully-parallel
"$distckpt" load "$fsdp" -t dp=5 --saved-topology dp=8 -d "$work/fsdp-sync" --fully-parallel --exchange gather_rounds
"$distckpt" load "$fsdp" -t dp=8 --saved-topology dp=8 -d "$work/fsdp-sync" --two-stage
echo "cli strategies: ok"
