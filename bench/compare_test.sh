#!/usr/bin/env bash
# bench/compare on small Google Benchmark JSON files: a regressed median is a
# suspect, --best judges the lowest sample (with its spread), a benchmark
# that skipped itself is reported skipped (neither failed nor missing).
#   compare_test.sh PATH/TO/compare
set -uo pipefail
compare=${1:?usage: compare_test.sh PATH/TO/compare}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$dir/baseline.json" <<'J'
{"ratios": [
  {"name": "x", "numerator": "BM_X/1", "counter": "over_raw", "baseline": 1.0, "tolerance": 0.5},
  {"name": "cold", "numerator": "BM_C/1", "counter": "over_raw", "baseline": 1.0, "tolerance": 0.5}
]}
J
run() {  # name, over_raw, aggregate ("" for a repetition)
  local agg=""
  [ -n "$3" ] && agg="\"aggregate_name\": \"$3\","
  echo "{\"run_name\": \"$1\", $agg \"real_time\": 1.0, \"time_unit\": \"ms\", \"over_raw\": $2}"
}
skipped='{"run_name": "BM_C/1", "error_occurred": true, "error_message": "cold skipped: no eviction", "real_time": 0}'
echo "{\"benchmarks\": [$(run BM_X/1 2.0 median), $(run BM_X/1 9.0 mean), $skipped]}" >"$dir/gate.json"
"$compare" --results "$dir/gate.json" --baseline "$dir/baseline.json" --suspects "$dir/s.txt" \
  >"$dir/out1" 2>&1
rc=$?
[ $rc = 1 ] || fail "a median of 2.0 over a limit of 1.5 must fail (exit $rc)"
grep -q '2.000 .*REGRESSED' "$dir/out1" || fail "the median (not the mean) is judged: $(cat "$dir/out1")"
grep -q 'skipped: cold skipped: no eviction' "$dir/out1" || fail "skipped not reported"
grep -q '1 regressed, 0 missing, 1 skipped' "$dir/out1" || fail "counts: $(tail -1 "$dir/out1")"
[ "$(cat "$dir/s.txt")" = "BM_X/1" ] || fail "suspects: $(cat "$dir/s.txt")"
# Re-measured: one sample under the limit passes with --best, with the spread.
echo "{\"benchmarks\": [$(run BM_X/1 1.7 ""), $(run BM_X/1 1.2 ""), $(run BM_X/1 1.7 median)]}" \
  >"$dir/re1.json"
"$compare" --results "$dir/gate.json" --results "$dir/re1.json" --baseline "$dir/baseline.json" \
  --best >"$dir/out2" 2>&1 || fail "best of 1.2 must pass: $(cat "$dir/out2")"
grep -q 'ok (best of 4: 1.200..2.000)' "$dir/out2" || fail "spread: $(cat "$dir/out2")"
# Without --best the same samples still fail (the median of the medians).
"$compare" --results "$dir/gate.json" --results "$dir/re1.json" --baseline "$dir/baseline.json" \
  >/dev/null 2>&1 && fail "without --best the medians (1.7, 2.0) must fail"
# Every sample slow: --best still fails.
echo "{\"benchmarks\": [$(run BM_X/1 1.8 ""), $(run BM_X/1 1.9 "")]}" >"$dir/re2.json"
"$compare" --results "$dir/gate.json" --results "$dir/re2.json" --baseline "$dir/baseline.json" \
  --best >"$dir/out3" 2>&1 && fail "all samples over the limit must fail: $(cat "$dir/out3")"
grep -q 'REGRESSED (best of 3: 1.800..2.000)' "$dir/out3" || fail "spread: $(cat "$dir/out3")"
# A numerator absent from every file (not skipped) is missing.
echo '{"benchmarks": []}' >"$dir/empty.json"
"$compare" --results "$dir/empty.json" --baseline "$dir/baseline.json" >"$dir/out4" 2>&1 &&
  fail "missing entries must fail"
grep -q '0 regressed, 2 missing, 0 skipped' "$dir/out4" || fail "missing: $(tail -1 "$dir/out4")"
# "cpu_seconds": the CPU time is judged, not the real time (a starved run).
cat >"$dir/cpu.json" <<'J'
{"ratios": [{"name": "v", "numerator": "BM_V/1", "cpu_seconds": true, "baseline": 0.1, "limit": 2.0,
  "tolerance": 1.0}]}
J
echo '{"benchmarks": [{"run_name": "BM_V/1", "aggregate_name": "median", "real_time": 3000,
  "cpu_time": 300, "time_unit": "ms"}]}' >"$dir/v.json"
"$compare" --results "$dir/v.json" --baseline "$dir/cpu.json" >"$dir/out5" 2>&1 ||
  fail "0.3 CPU seconds under a cap of 2.0 must pass: $(cat "$dir/out5")"
grep -q '0.300 ' "$dir/out5" || fail "cpu seconds: $(cat "$dir/out5")"
echo '{"benchmarks": [{"run_name": "BM_V/1", "aggregate_name": "median", "real_time": 3000,
  "cpu_time": 2500, "time_unit": "ms"}]}' >"$dir/v2.json"
"$compare" --results "$dir/v2.json" --baseline "$dir/cpu.json" >"$dir/out6" 2>&1 &&
  fail "2.5 CPU seconds over a cap of 2.0 must fail: $(cat "$dir/out6")"
# "or_limit_of": a cold ratio passes under its warm counterpart's limit too (2.5 > 1.5 x 1.0,
# but <= 2.0 x 1.5), not above both, and a name no entry has is an error (exit 2).
cat >"$dir/cold.json" <<'J'
{"ratios": [
  {"name": "warm", "numerator": "BM_W/1", "counter": "over_raw", "baseline": 2.0, "tolerance": 0.5},
  {"name": "cold", "numerator": "BM_C/1", "counter": "over_raw", "baseline": 1.0, "tolerance": 0.5,
   "or_limit_of": "warm"}
]}
J
for c in 2.5 3.2; do
  echo "{\"benchmarks\": [$(run BM_W/1 2.0 median), $(run BM_C/1 $c median)]}" >"$dir/c$c.json"
done
"$compare" --results "$dir/c2.5.json" --baseline "$dir/cold.json" >"$dir/out7" 2>&1 ||
  fail "cold 2.5 under the warm limit 3.0 must pass: $(cat "$dir/out7")"
grep -q '^cold .* 2.500 .* 1.000 .* 3.000 .* ok' "$dir/out7" || fail "or_limit_of: $(cat "$dir/out7")"
"$compare" --results "$dir/c3.2.json" --baseline "$dir/cold.json" >"$dir/out8" 2>&1 &&
  fail "cold 3.2 over both limits must fail: $(cat "$dir/out8")"
grep -q '^cold .*REGRESSED' "$dir/out8" || fail "or_limit_of over both: $(cat "$dir/out8")"
sed 's/"or_limit_of": "warm"/"or_limit_of": "nothing"/' "$dir/cold.json" >"$dir/cold2.json"
"$compare" --results "$dir/c2.5.json" --baseline "$dir/cold2.json" >"$dir/out9" 2>&1
[ $? = 2 ] && grep -q 'or_limit_of names no entry: nothing' "$dir/out9" ||
  fail "an unknown or_limit_of: $(cat "$dir/out9")"
echo "compare_test: ok"
