#!/usr/bin/env bash
# distckpt on checkpoint roots Megatron's own training loop wrote
# (fixtures/megatron-runs, each with expected/<root>.json from Megatron's
# load_checkpoint): for every root and saved iteration
#   - manage list: exit 0, every iteration complete (adopted: no distckpt manifest);
#   - inspect, inspect --check, diff X X, verify --data: exit 0;
#   - dump of every stored tensor that Megatron's load returns: the SHA-256
#     Megatron's load gave (expected/<root>.json);
#   - verify --spec gpt (the model and optimizer inferred from the checkpoint,
#     no --set) under the saved topology with --strict raise_all: the request is
#     exactly what the checkpoint stores; under tp=1: the verdict Megatron gives
#     (loads, or refused for a dp_reshardable distributed optimizer);
#   - train into the root without --resume: exit 2 naming it, no file changed;
#   - train --resume auto under another topology: Megatron's iteration loaded whole
#     (--steps at it: exit 0), past it exit 2; no file changed but the writer lock.
#   megatron_runs_cli_test.sh DISTCKPT FIXTURES_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 fixtures=$2
make_work mruns
roots=0 dumps=0
for root in "$fixtures"/*/; do
  root=${root%/}
  name=$(basename "$root")
  [ -f "$root/latest_checkpointed_iteration.txt" ] || continue
  expected=$fixtures/expected/$name.json
  [ -f "$expected" ] || fail "$name: no $expected"
  roots=$((roots + 1))
  spec_file=
  cp -r "$root" "$work/$name"
  r=$work/$name
  before=$(sums "$r")
  expect_rc 0 "$d" manage list "$r"
  grep -q INCOMPLETE "$work/out" && { cat "$work/out"; fail "$name: an iteration is incomplete"; }
  grep -q "not written by distckpt" "$work/out" || fail "$name: not adopted"
  # The saved topology and the iterations from expected/<root>.json.
  read -r topo world its < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))
t = "tp=%d,pp=%d" % (e["tp"], e["pp"])
dp = e["world"] // (e["tp"] * e["pp"])
if dp > 1: t += ",dp=%d" % dp
if e.get("ep", 1) > 1: t += ",ep=%d" % e["ep"]
print(t, e["world"], ",".join(sorted(e["iterations"], key=int)))' "$expected")
  gap=0  # 1: --spec gpt not checked (a stored-keys spec instead), for a root it cannot model
  # Megatron's dp_reshardable distributed optimizer: bucket space that --spec gpt does not
  # request (verify lists its keys as missing); every other root: an exact request.
  strict=(--strict raise_all)
  if "$d" inspect "$r/$(printf "iter_%07d" "${its%%,*}")" --json | python3 -c '
import json, sys
o = json.load(sys.stdin).get("common", {}).get("optimizer", {})
sys.exit(0 if isinstance(o, dict) and o.get("param_state_sharding_type") == "dp_reshardable" else 1)'; then
    strict=()
  fi
  for it in ${its//,/ }; do
    ck=$r/$(printf "iter_%07d" "$it")
    if [ $gap = 1 ]; then
      # Every stored tensor requested as stored (a spec of its keys): verify --data only.
      "$d" inspect "$ck" --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["tensors"]
print(json.dumps({"name": "stored", "tensors": [{"key": k} for k in sorted(t)]}))' \
        > "$work/spec.json"
      spec_file=$work/spec.json strict=()
    fi
    expect_rc 0 "$d" inspect "$ck"
    expect_rc 0 "$d" inspect "$ck" --check
    expect_rc 0 "$d" diff "$ck" "$ck"
    expect_rc 0 "$d" verify "$ck" --data -t "$topo" --spec "${spec_file:-gpt}" "${strict[@]}"
    grep -q "every checksum matches" "$work/out" || fail "$name $it: verify --data"
    grep -q "under $topo: loads" "$work/out" || fail "$name $it: not an exact request under $topo"
    # Every tensor both store: the bytes Megatron's load returns.
    python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["iterations"][sys.argv[2]]["tensors"]
for k, v in sorted(e.items()): print(k, v["sha256"])' "$expected" "$it" > "$work/want"
    "$d" inspect "$ck" --json > "$work/inspect.json"
    python3 -c '
import json, sys
print("\n".join(sorted(json.load(open(sys.argv[1]))["tensors"])))' "$work/inspect.json" \
      > "$work/stored"
    model=0
    while read -r key sha; do
      if ! grep -qxF "$key" "$work/stored"; then
        case $key in
          optimizer.*) continue ;;  # distributed optimizer: bucket space on disk
          *) fail "$name $it: model tensor $key not stored" ;;
        esac
      fi
      "$d" dump "$ck" "$key" --out "$work/t.bin" > /dev/null
      got=$(sha256sum "$work/t.bin" | cut -d' ' -f1)
      [ "$got" = "$sha" ] || fail "$name $it: $key: dump sha256 $got, Megatron's load $sha"
      dumps=$((dumps + 1))
      case $key in optimizer.*) ;; *) model=$((model + 1)) ;; esac
    done < "$work/want"
    [ $model -gt 0 ] || fail "$name $it: no model tensor compared"
  done
  # Another TP/PP: Megatron resumes any of these, except a dp_reshardable distributed
  # optimizer whose (TP, PP) changed (checkpointing.py: "(TP, PP) mismatch after resume").
  last=$r/$(printf "iter_%07d" "${its##*,}")
  case $topo in tp=1,pp=1*) other=tp=2 ;; *) other=tp=1 ;; esac
  if [ $gap = 1 ]; then
    :
  elif [ "$name" = moe-ep2 ]; then
    # Experts' own optimizer exists only at EP > 1: Megatron refuses an EP=2 checkpoint under
    # EP=1 ("Could not find parameter group"), resumes it under EP=4 (README, Observed).
    expect_rc 1 "$d" verify "$last" --spec gpt -t "$other"
    grep -q "WOULD NOT LOAD: .*param groups do not fit ep=1" "$work/out" ||
      { cat "$work/out"; fail "$name: under $other: not Megatron's refusal"; }
    expect_rc 0 "$d" verify "$last" --spec gpt -t tp=2,ep=2,dp=2
    expect_rc 0 "$d" verify "$last" --spec gpt -t ep=4,dp=4
  elif [ ${#strict[@]} = 0 ]; then
    expect_rc 1 "$d" verify "$last" --spec gpt -t "$other"
    grep -q "WOULD NOT LOAD: .*(TP, PP) mismatch" "$work/out" ||
      { cat "$work/out"; fail "$name: dp_reshardable under $other: not Megatron's refusal"; }
    expect_rc 0 "$d" verify "$last" --spec gpt -t tp=1  # a DP change only: Megatron resumes it
  else
    expect_rc 0 "$d" verify "$last" --spec gpt -t "$other"
  fi
  # The root itself where a checkpoint is expected: its tracker's iteration, said so.
  expect_rc 0 "$d" inspect "$r"
  grep -q "is a training run's root: reading $last" "$work/out" || { cat "$work/out"; fail "$name: inspect ROOT"; }
  expect_rc 0 "$d" diff "$r" "$last"
  grep -q "^identical" "$work/out" || { cat "$work/out"; fail "$name: diff ROOT \$last"; }
  expect_rc 2 "$d" train --topology tp=1 --dir "$r" --steps 2
  grep -q "already holds" "$work/out" || fail "$name: train refusal does not name the root's checkpoints"
  [ "$(sums "$r")" = "$before" ] || fail "$name: files changed"
  # train --resume auto under another topology Megatron accepts: Megatron's iteration loaded
  # whole; past it, refused (the simulated loop would write its own model into the run).
  case $name in
    moe-ep2) resume_topo=ep=4,dp=4 ;;
    distopt-dp2) resume_topo=tp=1 ;;
    *) resume_topo=$other ;;
  esac
  [ $gap = 1 ] || {
    expect_rc 0 "$d" train --dir "$r" --resume auto --steps "${its##*,}" --topology "$resume_topo"
    # Everything stored is placed, but for the dp_reshardable buckets --spec gpt does not model.
    placed="every stored tensor placed"
    [ ${#strict[@]} = 0 ] && placed="16 of 19 stored tensors placed"
    grep -q "resumed iteration ${its##*,} from $last (written by another tool.*$placed" "$work/out" &&
      grep -q "nothing to train" "$work/out" || { cat "$work/out"; fail "$name: train --resume auto"; }
    expect_rc 2 "$d" train --dir "$r" --resume auto --steps $((${its##*,} + 2)) --topology "$resume_topo"
    grep -q "another framework's model: .*nothing was trained or written" "$work/out" ||
      { cat "$work/out"; fail "$name: train past a Megatron iteration not refused"; }
    # The writer lock (io/file_lock.h: lock files are never unlinked) is all that is added.
    [ "$(sums "$r" | grep -v ' ./distckpt_writer.lock$')" = "$before" ] || fail "$name: files changed by train --resume"
  }
  echo "$name: ok ($its under $topo)"
done
[ $roots -gt 0 ] || fail "no root with a tracker under $fixtures"
# Megatron 0.18+'s integrity.json (save_integrity_manifest: SHA-256 of every file): checked by
# verify --data, a changed file refused naming it; a reshard of such a checkpoint carries a
# valid one.
ck=$work/integrity
cp -r "$work/gpt-default-tp2/iter_0000010" "$ck"
python3 - "$ck" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]
files = {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
         for n in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, n))}
json.dump({"algorithm": "sha256", "files": files}, open(os.path.join(d, "integrity.json"), "w"), indent=2)
PY
expect_rc 0 "$d" verify "$ck" --data --spec gpt -t tp=2
grep -qE "integrity.json: [0-9]+ files match their SHA-256" "$work/out" || { cat "$work/out"; fail "integrity.json not checked"; }
expect_rc 0 "$d" reshard "$ck" --spec gpt -t tp=1 --out "$work/integrity-r"
expect_rc 0 "$d" verify "$work/integrity-r" --data --spec gpt -t tp=1
grep -qE "integrity.json: [0-9]+ files match" "$work/out" || { cat "$work/out"; fail "reshard lost integrity.json"; }
printf ' ' >> "$ck/metadata.json"  # still Megatron's config, no longer the saved bytes
expect_rc 2 "$d" verify "$ck" --data --spec gpt -t tp=2
grep -q "metadata.json does not match its SHA-256" "$work/out" || { cat "$work/out"; fail "changed file not named"; }
echo "megatron runs: $roots roots, $dumps tensors dumped equal to Megatron's load"
