#!/usr/bin/env bash
# Restore write path A/B (issue 10), not a test: `dd oflag=direct` (the disk), `dd conv=fdatasync`,
# and sheaf restore of two sets with direct I/O (default) and --buffered-io, alternating, REPEAT
# times, each restore into a fresh folder (a folder deleted seconds before makes ext4's inode
# allocation slow), medians printed. ZSTD2_SET and LZ4_2_SET (a stripe of each set of 2 stripes)
# add direct restores of 2-stripe sets.
#
#   ZSTD_SET=/var/tmp/r10/set_1.sheaf LZ4_SET=/var/tmp/r10/lz4_1.sheaf WORK=/var/tmp/r10 REPEAT=3 \
#     [ZSTD2_SET=/var/tmp/r10/zstd2_a.sheaf LZ4_2_SET=/var/tmp/r10/lz4x2_a.sheaf] scripts/restore-io-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
: "${ZSTD_SET:?a zstd:low set}" "${LZ4_SET:?an lz4 set}" "${WORK:?a folder on the filesystem to test}"
REPEAT=${REPEAT:-3}
cd "$WORK"
raw=$("$S" verify "$ZSTD_SET" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_raw"])')
mb=$((raw / 1048576))
modes="dd-direct dd-fdatasync zstd-direct zstd-buffered lz4-direct lz4-buffered"
[ -z "${ZSTD2_SET:-}" ] || modes="$modes zstd2-direct"
[ -z "${LZ4_2_SET:-}" ] || modes="$modes lz4x2-direct"
declare -A T
t() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
sleep 40 # let earlier deletions age out of ext4's recently-deleted window
for i in $(seq "$REPEAT"); do
  for m in $modes; do
    rm -f dd; sync; sleep 1; out=ab_${i}_$m
    case $m in
      dd-direct) x=$(t dd if=/dev/zero of=dd bs=1M count=$mb oflag=direct) ;;
      dd-fdatasync) x=$(t dd if=/dev/zero of=dd bs=1M count=$mb conv=fdatasync) ;;
      zstd-direct) x=$(t "$S" restore "$ZSTD_SET" --to "$out") ;;
      zstd-buffered) x=$(t "$S" restore "$ZSTD_SET" --to "$out" --buffered-io) ;;
      lz4-direct) x=$(t "$S" restore "$LZ4_SET" --to "$out") ;;
      lz4-buffered) x=$(t "$S" restore "$LZ4_SET" --to "$out" --buffered-io) ;;
      zstd2-direct) x=$(t "$S" restore "$ZSTD2_SET" --to "$out") ;;
      lz4x2-direct) x=$(t "$S" restore "$LZ4_2_SET" --to "$out") ;;
    esac
    T[$m]="${T[$m]:-} $x"
  done
done
rm -rf ab_* dd
echo "raw bytes: $raw ($mb MiB), repeats: $REPEAT"
for m in $modes; do
  med=$(echo ${T[$m]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  echo "$m: median $med s (runs:${T[$m]}) $(awk -v b="$raw" -v s="$med" 'BEGIN{printf "%.0f MB/s", b/s/1e6}')"
done
