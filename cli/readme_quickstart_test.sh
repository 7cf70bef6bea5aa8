#!/usr/bin/env bash
# README.md's quick start, run as written: every `$d ...` line of its first sh block
# (/tmp paths moved into a work directory) exits 0, or 2 where its comment says
# "refused", and the load's read/needed figure the paragraph below it quotes
# ("`read/needed X` for the load above") is the one that load prints.
#   readme_quickstart_test.sh DISTCKPT SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/../ci/lib/testlib.sh"
d=$1 src=$2
make_work readme
cd "$src"
block=$(awk '/^## Quick start/ {on=1} on && /^```sh/ {inside=1; next} inside && /^```/ {exit}
             inside' README.md)
[ -n "$block" ] || fail "README.md: no sh block under '## Quick start'"
ran=0 last_load=
while IFS= read -r line; do
  case $line in '$d '*) ;; *) continue ;; esac
  cmd=${line%%#*}
  comment=${line#"$cmd"}
  cmd=${cmd//\/tmp\//$work\/}
  want=0
  case $comment in *refused*) want=2 ;; esac
  eval "expect_rc $want \"\$d\" ${cmd#'$d '}"
  cp "$work/out" "$work/out.$ran"
  case $cmd in '$d load '*) [ $want = 0 ] && last_load=$work/out.$ran ;; esac
  ran=$((ran + 1))
done <<<"$block"
[ $ran -ge 5 ] || fail "README.md quick start: only $ran commands found"
quoted=$(grep -o '`read/needed [0-9.]*` for the load above' README.md | grep -o '[0-9][0-9.]*')
[ -n "$quoted" ] || fail "README.md: no '\`read/needed X\` for the load above'"
[ -n "$last_load" ] || fail "README.md quick start: no load that succeeds"
printed=$(grep -o 'read/needed [0-9.]*' "$last_load" | tail -1 | grep -o '[0-9][0-9.]*')
[ "$printed" = "$quoted" ] ||
  fail "README.md quotes read/needed $quoted for the load above; it prints $printed"
echo "README quick start: $ran commands as documented; read/needed $printed as quoted"
