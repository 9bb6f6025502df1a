#!/usr/bin/env bash
# make demo: generate a data set, back it up to two stripes, verify, restore, compare.
set -euo pipefail
cd "$(dirname "$0")/.."
sheaf=target/release/sheaf
size=${DEMO_SIZE:-256MiB}
work=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== generating $size of seeded data in $work/src"
$sheaf generate "$work/src" --size "$size"
mkdir -p "$work/stripes"
for codec in lz4 deflate:1 zstd:low; do
  echo
  echo "== sheaf backup --compression $codec to 2 stripes"
  rm -f "$work"/stripes/*
  $sheaf backup "$work/src" --to "$work/stripes/demo_1.sheaf" --to "$work/stripes/demo_2.sheaf" --compression "$codec"
done
echo
echo "== sheaf verify (reads every stripe, checks every checksum, writes nothing)"
$sheaf verify "$work/stripes/demo_1.sheaf"
echo
echo "== sheaf restore (finds demo_2 beside demo_1)"
$sheaf restore "$work/stripes/demo_1.sheaf" --to "$work/restored"
diff -r "$work/src" "$work/restored" && echo "restored tree is identical to the source"
