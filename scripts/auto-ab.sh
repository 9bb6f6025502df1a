#!/usr/bin/env bash
# --compression auto against fixed levels, pairwise (AB BA ...), on one directory:
#   unthrottled (a local disk): auto against zstd:low, time;
#   --max-rate RATE:            auto against zstd:high, size and time (against size / RATE).
#   scripts/auto-ab.sh SOURCE_DIR WORK_DIR [ROUNDS=3] [RATE=100MiB]
set -euo pipefail
src=$1 work=$2 rounds=${3:-3} rate=${4:-100MiB}
sheaf=${SHEAF:-$(dirname "$0")/../target/release/sheaf}
mkdir -p "$work"
results=$work/auto-ab.txt
: > "$results"
one() { # label codec extra-args...
  local label=$1 codec=$2; shift 2
  rm -f "$work/a.sheaf"
  "$sheaf" backup "$src" -c "$codec" --to "$work/a.sheaf" --json "$@" |
    python3 -c "import json,sys; v=json.load(sys.stdin); print('$label', v['seconds'], v['bytes_written'], json.dumps(v.get('auto_levels') or {}).replace(' ', ''))" | tee -a "$results"
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    one low zstd:low; one auto auto; one high-rate zstd:high --max-rate "$rate"; one auto-rate auto --max-rate "$rate"
  else
    one auto auto; one low zstd:low; one auto-rate auto --max-rate "$rate"; one high-rate zstd:high --max-rate "$rate"
  fi
done
rm -f "$work/a.sheaf"
python3 - "$results" "$rate" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
def med(label, i): return st.median(float(r[i]) for r in rows if r[0] == label)
size = {l: med(l, 2) for l in ("low", "auto", "high-rate", "auto-rate")}
secs = {l: med(l, 1) for l in ("low", "auto", "high-rate", "auto-rate")}
rate_text = sys.argv[2]
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
rate = next(float(rate_text[:-3]) * m for u, m in units.items() if rate_text.endswith(u))
print(f"unthrottled: zstd:low {secs['low']:.2f} s, auto {secs['auto']:.2f} s: time x{secs['auto']/secs['low']:.3f}")
io = size['auto-rate'] / rate
print(f"--max-rate {rate_text}: zstd:high {secs['high-rate']:.2f} s {size['high-rate']/2**20:.1f} MiB, auto {secs['auto-rate']:.2f} s {size['auto-rate']/2**20:.1f} MiB: "
      f"size x{size['auto-rate']/size['high-rate']:.3f} of high, time x{secs['auto-rate']/io:.3f} of its I/O-bound time ({io:.2f} s), "
      f"x{secs['auto-rate']/(size['high-rate']/rate):.3f} of high's I/O-bound time ({size['high-rate']/rate:.2f} s)")
PY
