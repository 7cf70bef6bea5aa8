# Shared by the shell tests (cli/*_test.sh, scenarios/peer/*_test.sh). Source it
# after `set -euo pipefail`:
#   . "$(dirname "$0")/../ci/lib/testlib.sh"          # from cli/
#   . "$(dirname "$0")/../../ci/lib/testlib.sh"       # from scenarios/peer/
#
#   make_work NAME          work=/tmp/distckpt-NAME-XXXXXX (under /tmp: the torch 2
#                           chroot sees it at the same path), removed on exit
#   fail MSG...             prints "FAIL: MSG" and exits 1
#   expect_rc RC CMD...     runs CMD (output in $work/out); fails unless it exits RC
#   ok CMD...               runs CMD without -e (output in $work/out, $work/err); fails
#                           unless it exits 0
#   refused PATTERN CMD...  fails unless CMD exits 2 with PATTERN (grep -E) in its output
#   sums DIR                sha256 of every file under DIR, sorted by path (to show that
#                           nothing under DIR changed)
#   need_torch2 [MODULE]    sets $python to the torch 2 peer: DISTCKPT_TORCH2_PYTHON, else,
#                           as root, the chroot /opt/distckpt-torch2 (ci/setup-peers; with
#                           MODULE, only when it imports MODULE); skipped (exit 77) without
#                           one or with DISTCKPT_NO_PEERS set
#   need_tree VAR WHAT FILE...
#                           skipped (exit 77) unless the directory in $VAR holds every
#                           FILE (relative paths); WHAT names the tree in the message

make_work() {
  work=$(mktemp -d "/tmp/distckpt-$1-XXXXXX")
  trap 'rm -rf "$work"' EXIT
}

fail() {
  echo "FAIL: $*"
  exit 1
}

expect_rc() {  # expect_rc RC CMD...
  local want=$1
  shift
  set +e
  "$@" >"$work/out" 2>&1
  local rc=$?
  set -e
  [ $rc = "$want" ] || { cat "$work/out"; fail "exit $rc (want $want): $*"; }
}

ok() {  # ok CMD...
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ $rc = 0 ] || { cat "$work/out" "$work/err"; fail "exit $rc from: $*"; }
}

refused() {  # refused PATTERN CMD...
  local pattern=$1 rc=0
  shift
  "$@" >"$work/out" 2>&1 || rc=$?
  [ $rc = 2 ] || { cat "$work/out"; fail "exit $rc (want 2) from: $*"; }
  grep -qE "$pattern" "$work/out" || { cat "$work/out"; fail "no /$pattern/ from: $*"; }
}

sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

need_torch2() {
  local module=${1:-} root=/opt/distckpt-torch2
  python=${DISTCKPT_TORCH2_PYTHON:-}
  if [ -z "$python" ] && [ "$(id -u)" -eq 0 ] && [ -x "$root/usr/bin/python3" ] &&
     mountpoint -q "$root/tmp" &&
     { [ -z "$module" ] || chroot "$root" python3 -c "import $module" 2>/dev/null; }; then
    python="chroot $root env USE_LIBUV=0 OMP_NUM_THREADS=1 python3"
  fi
  if [ -n "${DISTCKPT_NO_PEERS:-}" ] || [ -z "$python" ]; then
    echo "SKIPPED: no torch 2 peer${module:+ with $module} (run ci/setup-peers, as root, and export the line it prints)"
    exit 77
  fi
}

need_tree() {
  local var=$1 what=$2 dir=${!1:-} file
  shift 2
  for file in "$@"; do
    if [ -z "$dir" ] || [ ! -f "$dir/$file" ]; then
      echo "SKIPPED: $var is not $what ($file)"
      exit 77
    fi
  done
}
