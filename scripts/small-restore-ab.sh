#!/usr/bin/env bash
# Small-files restore A/B (issue 10), not a test: `sheaf restore` (durable when it returns) against
# `zstd -dc | tar -xf -` then `sync`, of the same tree of COUNT files (default 100000x8KiB, made by
# `sheaf generate --small`), REPEAT rounds (default 4), medians printed, with the CPU time the
# whole machine spent (kernel write-back threads included: they do much of the work). Fair to both:
# - the order alternates each round (the second restore of a round runs after the first's creates);
# - the set and the archive are read once, untimed, before each run (this VM's page cache drops
#   them between runs);
# - each run starts on a filesystem that has seen no large delete. ext4 without a journal (this
#   VM's root filesystem) skips, for every inode it allocates, inodes deleted in the last 60 s, or
#   the last 360 s where their inode-table block is dirty again: whoever runs soon after a large
#   delete pays for it. With FRESH=IMAGE (root only) each run gets a new ext4 made with mkfs's
#   defaults (a journal, as most servers have) on a loop device over the file IMAGE (8 GiB,
#   sparse), with direct I/O to it; otherwise runs go to WORK after waiting WAIT seconds (default
#   60) since the last deletion, which is not always enough.
#
#   WORK=/var/tmp/small10 [FRESH=/var/tmp/loop.img] [SMALL=100000x8KiB] [REPEAT=4] [WAIT=60] \
#     [SHEAF=path/to/sheaf] scripts/small-restore-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SHEAF:-$PWD/target/release/sheaf}
[ -x "$S" ] || cargo build --release --locked
: "${WORK:?a folder for the tree, the set and the archive}"
SMALL=${SMALL:-100000x8KiB} REPEAT=${REPEAT:-4} WAIT=${WAIT:-60} FRESH=${FRESH:-}
mkdir -p "$WORK"; cd "$WORK"
[ -d src ] || "$S" generate src --small "$SMALL" >/dev/null
[ -f set_0.sheaf ] || "$S" backup src --to "$WORK/set_0.sheaf" -c zstd:1 >/dev/null
[ -f a.tar.zst ] || (tar -cf - -C src . | zstd -q -1 -T2 >a.tar.zst)
MNT=$WORK/mnt LOOP=
release() { if [ -n "$LOOP" ]; then umount "$MNT" 2>/dev/null || true; losetup -d "$LOOP" 2>/dev/null || true; LOOP=; fi; }
trap release EXIT
# OUT: where the next run writes, a new filesystem or a folder of WORK.
place() {
  if [ -n "$FRESH" ]; then
    release
    truncate -s 8G "$FRESH"
    mkfs.ext4 -q -F "$FRESH"
    LOOP=$(losetup --direct-io=on -f --show "$FRESH")
    mkdir -p "$MNT"; mount "$LOOP" "$MNT"
    OUT=$MNT/out
  else
    OUT=$WORK/out_$1
  fi
}
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
declare -A T C
for i in $(seq "$REPEAT"); do
  if [ -z "$FRESH" ]; then rm -rf out_*; sync; sleep "$WAIT"; fi
  order="sheaf tar"; [ $((i % 2)) = 0 ] && order="tar sheaf"
  for m in $order; do
    place "$m$i"
    case $m in sheaf) cat set_0.sheaf >/dev/null ;; tar) cat a.tar.zst >/dev/null; mkdir -p "$OUT" ;; esac
    sync; sleep 1
    c=$(busy) s=$(date +%s.%N)
    case $m in
      sheaf) "$S" restore set_0.sheaf --to "$OUT" >/dev/null ;;
      tar) zstd -q -dc a.tar.zst | tar -xf - -C "$OUT"; sync ;;
    esac
    T[$m]="${T[$m]:-} $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')"
    C[$m]="${C[$m]:-} $(awk -v a="$c" -v b="$(busy)" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')"
  done
done
release
rm -rf out_*
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for m in sheaf tar; do
  echo "$m: median $(echo ${T[$m]} | median) s wall, $(echo ${C[$m]} | median) s CPU (runs:${T[$m]}; CPU:${C[$m]})"
done
