#!/usr/bin/env bash
# DCP interop against a real PyTorch peer (ctest label `peer`):
#   peer_test.sh DISTCKPT PEER SCENARIO FORMAT
# PEER is torch113 (Debian's python3-torch) or torch2 (torch 2.6 in the chroot
# ci/setup-peers builds). Its interpreter comes from DISTCKPT_TORCH113_PYTHON /
# DISTCKPT_TORCH2_PYTHON (the lines ci/setup-peers prints), else from the
# default places; without one (or with DISTCKPT_NO_PEERS=1) the test is
# skipped (exit 77, which ctest reports as skipped, not failed).
#  1. torch loads what `distckpt save --format FORMAT` wrote, under another
#     sharding, and compares every element with `distckpt dump`;
#  2. distckpt reads what torch wrote: `dump` of every tensor equals torch's
#     bytes, `inspect` lists it, and the bytes items come back as common state.
set -euo pipefail
. "$(dirname "$0")/../../ci/lib/testlib.sh"
exe=$1 peer=$2 scenario=$3 format=$4
here=$(cd "$(dirname "$0")" && pwd)

python=""
# Finds torch without importing it (an import takes seconds).
has_torch='import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
has_torch2='import importlib.util, os, sys; s = importlib.util.find_spec("torch")
sys.exit(s is None or not os.path.isdir(os.path.join(os.path.dirname(s.origin), "distributed", "checkpoint")))'
case "${DISTCKPT_NO_PEERS:+none}$peer" in
  none*) ;;  # DISTCKPT_NO_PEERS=1: as if no peer were installed
  torch113)
    python=${DISTCKPT_TORCH113_PYTHON:-}
    # torch 1.x: DCP lives at torch.distributed._shard.checkpoint only.
    if [ -z "$python" ] && /usr/bin/python3 -c "$has_torch" 2>/dev/null &&
       ! /usr/bin/python3 -c "$has_torch2" 2>/dev/null; then
      python=/usr/bin/python3
    fi ;;
  torch2)
    python=${DISTCKPT_TORCH2_PYTHON:-}
    root=/opt/distckpt-torch2  # ci/setup-peers --torch2 /opt/distckpt-torch2
    if [ -z "$python" ] && [ "$(id -u)" -eq 0 ] && [ -x "$root/usr/bin/python3" ] &&
       mountpoint -q "$root/tmp" && chroot "$root" python3 -c "$has_torch" 2>/dev/null; then
      python="chroot $root env USE_LIBUV=0 python3"
    fi ;;
  *) echo "unknown peer $peer" >&2; exit 2 ;;
esac
if [ -z "$python" ]; then
  echo "SKIPPED: no $peer peer installed (run ci/setup-peers, as root, and export the line it prints)"
  exit 77
fi

make_work peer  # under /tmp: the chroot sees it at the same path
cp "$here/torch_peer.py" "$here/dataclass_shim.py" "$work/"
peer() { $python "$work/torch_peer.py" "$@"; }

echo "== torch ($peer) loads distckpt's $format checkpoint"
"$exe" save "$scenario" --topology tp=2,pp=2,dp=2 --dir "$work/ours" --format "$format"
"$exe" inspect "$work/ours" --json > "$work/ours.json"
mkdir "$work/dumps"
for key in $(peer keys "$work/ours.json"); do
  "$exe" dump "$work/ours" "$key" --out "$work/dumps/$key.bin" >/dev/null
done
peer load "$work/ours" "$work/dumps"

echo "== distckpt reads torch's ($peer) checkpoint"
keys=$(peer save "$work/theirs" "$work/expected")
"$exe" inspect "$work/theirs"
"$exe" inspect "$work/theirs" --json > "$work/theirs.json"
for key in $keys; do
  "$exe" dump "$work/theirs" "$key" --out "$work/$key.bin" >/dev/null
  cmp "$work/$key.bin" "$work/expected/$key.bin"
  echo "dump $key: equals torch's bytes"
done
peer check-common "$work/theirs.json" "$work/expected/common.json"
