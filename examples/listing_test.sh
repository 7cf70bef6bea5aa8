#!/usr/bin/env bash
# A program a document quotes must be the program that is built and run: the
# listing between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in DOC (a fenced
# block right inside the markers) is compared with FILE; exit 1 naming both
# when they differ or DOC has no such listing. Used by the package test
# (examples/consumer/install_test.sh) and ctest example_minimal_listing.
#   examples/listing_test.sh DOC NAME FILE
set -euo pipefail
doc=${1:?usage: listing_test.sh DOC NAME FILE} name=${2:?} file=${3:?}
listing=$(sed -n "/<!-- $name:begin -->/,/<!-- $name:end -->/p" "$doc")
if [ -z "$listing" ]; then
  echo "listing_test: $doc has no listing between <!-- $name:begin --> and <!-- $name:end -->"
  exit 1
fi
if ! diff <(sed '1,2d;$d' <<<"$listing" | sed '$d') "$file" >/dev/null; then
  echo "listing_test: the listing '$name' in $doc differs from $file"
  exit 1
fi
