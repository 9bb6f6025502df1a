#!/usr/bin/env bash
# What encryption costs: backup and restore of one directory with and without
# --encryption-key-file, alternated pairwise (AB BA AB ...) so that drift and order hit both alike.
#   scripts/encryption-ab.sh SOURCE_DIR WORK_DIR [ROUNDS=5] [CODEC=zstd:low]
# Prints each run's seconds and CPU (user+sys), then medians and the ratio encrypted/plain.
set -euo pipefail
src=$1 work=$2 rounds=${3:-5} codec=${4:-zstd:low}
sheaf=${SHEAF:-$(dirname "$0")/../target/release/sheaf}
mkdir -p "$work"
key=$work/ab.key
[ -f "$key" ] || head -c 32 /dev/urandom > "$key"
run() { # label, command...: prints "label seconds cpu"
  local label=$1; shift
  local out; out=$( { /usr/bin/time -f '%e %U %S' "$@" >/dev/null; } 2>&1 | tail -1)
  read -r wall user sys <<<"$out"
  echo "$label $wall $(echo "$user + $sys" | bc)"
}
results=$work/ab.txt
: > "$results"
for r in $(seq 1 "$rounds"); do
  order="plain enc"; [ $((r % 2)) = 0 ] && order="enc plain"
  for mode in $order; do
    k=(); [ $mode = enc ] && k=(--encryption-key-file "$key")
    rm -f "$work/$mode.sheaf"
    run "backup-$mode" "$sheaf" backup "$src" -c "$codec" --to "$work/$mode.sheaf" "${k[@]}" | tee -a "$results"
  done
  for mode in $order; do
    k=(); [ $mode = enc ] && k=(--encryption-key-file "$key")
    rm -rf "$work/out-$mode"
    run "restore-$mode" "$sheaf" restore "$work/$mode.sheaf" --to "$work/out-$mode" "${k[@]}" | tee -a "$results"
    rm -rf "$work/out-$mode"
  done
done
python3 - "$results" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for op in ("backup", "restore"):
    for mode in ("plain", "enc"):
        w = [float(r[1]) for r in rows if r[0] == f"{op}-{mode}"]
        c = [float(r[2]) for r in rows if r[0] == f"{op}-{mode}"]
        med[(op, mode)] = (st.median(w), st.median(c))
    (pw, pc), (ew, ec) = med[(op, "plain")], med[(op, "enc")]
    print(f"{op}: plain {pw:.2f} s ({pc:.2f} s CPU), encrypted {ew:.2f} s ({ec:.2f} s CPU): time x{ew/pw:.3f}, CPU x{ec/pc:.3f}")
PY
