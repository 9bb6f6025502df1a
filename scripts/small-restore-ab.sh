#!/usr/bin/env bash
# Small-files restore A/B (issue 10), not a test: `sheaf restore` (durable when it returns) against
# `zstd -dc | tar -xf -` then `sync`, of the same tree of COUNT files (default 100000x8KiB, made by
# `sheaf generate --small`), REPEAT rounds (default 4), medians printed. Fair to both:
# - each round starts WAIT seconds (default 60) after the last deletion: ext4 scans recently
#   deleted inodes for every file it creates, and whoever ran soon after a large delete paid for it;
# - the order alternates each round (the second restore of a round runs after the first's creates);
# - the set and the archive are read once, untimed, before each run (this VM's page cache drops
#   them between runs).
#
#   WORK=/var/tmp/small10 [SMALL=100000x8KiB] [REPEAT=4] [WAIT=60] scripts/small-restore-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
: "${WORK:?a folder on the filesystem to test}"
SMALL=${SMALL:-100000x8KiB} REPEAT=${REPEAT:-4} WAIT=${WAIT:-60}
mkdir -p "$WORK"; cd "$WORK"
[ -d src ] || "$S" generate src --small "$SMALL" >/dev/null
[ -f set_0.sheaf ] || "$S" backup src --to "$WORK/set_0.sheaf" -c zstd:1 >/dev/null
[ -f a.tar.zst ] || (tar -cf - -C src . | zstd -q -1 -T2 >a.tar.zst)
declare -A T
for i in $(seq "$REPEAT"); do
  rm -rf out_*; sync; sleep "$WAIT"
  order="sheaf tar"; [ $((i % 2)) = 0 ] && order="tar sheaf"
  for m in $order; do
    case $m in sheaf) cat set_0.sheaf >/dev/null ;; tar) cat a.tar.zst >/dev/null ;; esac
    sync; sleep 1
    s=$(date +%s.%N)
    case $m in
      sheaf) "$S" restore set_0.sheaf --to "out_$m$i" >/dev/null ;;
      tar) mkdir "out_$m$i"; zstd -q -dc a.tar.zst | tar -xf - -C "out_$m$i"; sync ;;
    esac
    T[$m]="${T[$m]:-} $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')"
  done
done
rm -rf out_*
for m in sheaf tar; do
  med=$(echo ${T[$m]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  echo "$m: median $med s (runs:${T[$m]})"
done
