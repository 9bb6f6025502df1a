#!/usr/bin/env bash
# --db-include against a full restore of the same PostgreSQL backup, pairwise (AB BA ...):
#   [FRESH=/var/tmp/loop.img] scripts/db-include-ab.sh STRIPE DATABASE WORK_DIR [ROUNDS=3]
# Prints each restore's seconds and bytes read, then medians and the ratio. With FRESH (root
# only), each restore goes to a new journalled ext4 on a loop device made from that image file:
# on this VM's root ext4 a delete taxes the creates that follow it (about 1 ms each, measured with
# strace), which buries what is measured here.
set -euo pipefail
stripe=$1 db=$2 work=$3 rounds=${4:-3} FRESH=${FRESH:-}
LOOP= MNT=$work/mnt
release() { if [ -n "$LOOP" ]; then umount "$MNT" 2>/dev/null || true; losetup -d "$LOOP" 2>/dev/null || true; LOOP=; fi; }
trap release EXIT
sheaf=${SHEAF:-$(dirname "$0")/../target/release/sheaf}
mkdir -p "$work"
results=$work/db-include-ab.txt
: > "$results"
one() { # label extra-args...
  local label=$1; shift
  local to=$work/r
  if [ -n "$FRESH" ]; then
    release; rm -f "$FRESH"; truncate -s 8G "$FRESH"; mkfs.ext4 -q -F "$FRESH"
    LOOP=$(losetup --direct-io=on -f --show "$FRESH"); mkdir -p "$MNT"; mount "$LOOP" "$MNT"; to=$MNT/r
  else
    rm -rf "$to"; sync
  fi
  "$sheaf" restore "$stripe" --to "$to" --json "$@" |
    python3 -c "import json,sys; v=json.load(sys.stdin); print('$label', v['seconds'], v['bytes_read'])" | tee -a "$results"
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then one full; one include --db-include "$db"; else one include --db-include "$db"; one full; fi
done
rm -rf "$work/r"; release; [ -n "$FRESH" ] && rm -f "$FRESH"
python3 - "$results" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
med = lambda label, i: st.median(float(r[i]) for r in rows if r[0] == label)
f, i = med("full", 1), med("include", 1)
print(f"full restore {f:.2f} s ({med('full', 2)/2**20:.0f} MiB read), --db-include {i:.2f} s ({med('include', 2)/2**20:.0f} MiB read): x{i/f:.3f}")
PY
