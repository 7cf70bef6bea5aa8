#!/usr/bin/env bash
# The package test (ctest package_consumer, label unit): installs the built
# library into a temporary prefix, configures and builds examples/consumer
# against it with find_package(distckpt), and runs it (save under tp=2, load
# under tp=4 and dp=2, DCP round trip; every element checked). Fails when
# the install lacks a header, a library or a dependency, or when the
# installed package still points into the source or build tree.
#   examples/consumer/install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: install_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
# docs/api.md shows this program: the listing must be its source.
"$src/examples/listing_test.sh" "$src/docs/api.md" consumer "$src/examples/consumer/main.cc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/distckpt/distckpt.h"
test -f "$tmp/prefix/lib/cmake/distckpt/distckptConfig.cmake" \
  || test -f "$tmp/prefix/lib64/cmake/distckpt/distckptConfig.cmake" \
  || { echo "install_test: no distckptConfig.cmake under $tmp/prefix"; exit 1; }
# Relocatable: no installed header or CMake file may name the source or the build
# tree (the archives' debug information may).
if grep -rlF -e "$src/" -e "$build/" "$tmp/prefix/include" "$tmp/prefix"/lib*/cmake; then
  echo "install_test: the files above point into $src or $build"
  exit 1
fi
# Only the library: no harness, CLI or test headers.
if find "$tmp/prefix/include" -path '*harness*' -o -name '*test*' | grep .; then
  echo "install_test: the files above are not part of the library"
  exit 1
fi

args=(-DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$(cache CMAKE_CXX_COMPILER)"
      -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)")
launcher=$(cache CMAKE_CXX_COMPILER_LAUNCHER)
if [ -n "$launcher" ]; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"); fi
cmake -S "$src/examples/consumer" -B "$tmp/build" "${args[@]}" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer" "$tmp/work"
