#!/usr/bin/env bash
# Restore write path A/B (issue 10), not a test: `dd oflag=direct` (the disk), `dd conv=fdatasync`,
# `sheaf verify` (read and decompress, no writes: the CPU's ceiling) and sheaf restore of two sets
# with direct I/O through io_uring (default), --sync-writes and --buffered-io, alternating, REPEAT
# times, each restore into a fresh folder, medians printed. Each round's restores are deleted at its
# end and the next round waits 40 s (ext4 makes inode allocation slow while deletions are recent).
# ZSTD2_SET and LZ4_2_SET (a stripe of each set of 2 stripes) add direct restores of 2-stripe sets.
# Before each sheaf run the set's stripes are read once, untimed, so that the restore is measured
# writing, not reading its set from the same disk.
#
#   ZSTD_SET=/var/tmp/r10/set_1.sheaf LZ4_SET=/var/tmp/r10/lz4_1.sheaf WORK=/var/tmp/r10 REPEAT=3 \
#     [ZSTD2_SET=/var/tmp/r10/zstd2_a.sheaf LZ4_2_SET=/var/tmp/r10/lz4x2_a.sheaf] [MODES="dd-direct zstd-direct"] \
#     scripts/restore-io-ab.sh
#   S=path                 the sheaf binary (default target/release/sheaf)
#   S_BASELINE=path        another build: adds zstd-direct-base and lz4-direct-base, restored in the
#                          same rounds (before/after a change)
set -euo pipefail
cd "$(dirname "$0")/.."
S=${S:-$PWD/target/release/sheaf}
[ -x "$S" ] || cargo build --release --locked
B=${S_BASELINE:-}
: "${ZSTD_SET:?a zstd:low set}" "${LZ4_SET:?an lz4 set}" "${WORK:?a folder on the filesystem to test}"
REPEAT=${REPEAT:-3}
cd "$WORK"
raw=$("$S" verify "$ZSTD_SET" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_raw"])')
mb=$((raw / 1048576))
modes="dd-direct dd-fdatasync zstd-verify zstd-direct zstd-sync zstd-buffered lz4-verify lz4-direct lz4-sync lz4-buffered"
[ -z "${ZSTD2_SET:-}" ] || modes="$modes zstd2-direct"
[ -z "${LZ4_2_SET:-}" ] || modes="$modes lz4x2-direct"
[ -z "$B" ] || modes="$modes zstd-direct-base lz4-direct-base"
modes=${MODES:-$modes}
declare -A T
t() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
# Read a set's stripes (NAME_x.sheaf beside it) once, untimed: this VM's page cache does not keep
# them from one run to the next, and a cold set would be read from the disk being written.
warm() { local b; b=$(basename "$1"); cat "$(dirname "$1")/${b%_*}"_*.sheaf >/dev/null; }
for i in $(seq "$REPEAT"); do
  rm -rf ab_*; sync
  sleep 40 # let earlier deletions age out of ext4's recently-deleted window
  for m in $modes; do
    rm -f dd; sync; out=ab_${i}_$m
    case $m in
      zstd-*) warm "$ZSTD_SET" ;; lz4-*) warm "$LZ4_SET" ;; zstd2-*) warm "$ZSTD2_SET" ;; lz4x2-*) warm "$LZ4_2_SET" ;;
    esac
    sleep 1
    case $m in
      dd-direct) x=$(t dd if=/dev/zero of=dd bs=1M count=$mb oflag=direct) ;;
      dd-fdatasync) x=$(t dd if=/dev/zero of=dd bs=1M count=$mb conv=fdatasync) ;;
      zstd-direct) x=$(t "$S" restore "$ZSTD_SET" --to "$out") ;;
      zstd-buffered) x=$(t "$S" restore "$ZSTD_SET" --to "$out" --buffered-io) ;;
      zstd-sync) x=$(t "$S" restore "$ZSTD_SET" --to "$out" --sync-writes) ;;
      zstd-verify) x=$(t "$S" verify "$ZSTD_SET") ;;
      lz4-sync) x=$(t "$S" restore "$LZ4_SET" --to "$out" --sync-writes) ;;
      lz4-verify) x=$(t "$S" verify "$LZ4_SET") ;;
      lz4-direct) x=$(t "$S" restore "$LZ4_SET" --to "$out") ;;
      lz4-buffered) x=$(t "$S" restore "$LZ4_SET" --to "$out" --buffered-io) ;;
      zstd2-direct) x=$(t "$S" restore "$ZSTD2_SET" --to "$out") ;;
      lz4x2-direct) x=$(t "$S" restore "$LZ4_2_SET" --to "$out") ;;
      zstd-direct-base) x=$(t "$B" restore "$ZSTD_SET" --to "$out") ;;
      lz4-direct-base) x=$(t "$B" restore "$LZ4_SET" --to "$out") ;;
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
