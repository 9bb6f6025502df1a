#!/usr/bin/env bash
# Engine benchmark (not a test): NUL-target throughput of lz4, zstd:low and deflate:1 on real
# PostgreSQL pages -- TPC-H lineitem (tpchgen, via sheaf load-tpch) in a scratch cluster -- against the codec
# ceiling: cores x the single-core speed of the same codec and level at the same chunk size on the
# same bytes (zstd -b1 -B1M, lz4 -b1 -B1M, igzip -1). Also restore throughput and peak RSS against
# the printed memory budget. Prints a Markdown report; figures are MB/s (10^6 bytes).
#
#   SCALE=1 scripts/bench-engine.sh          # TPC-H scale factor (default 1)
#   REPEAT=3                                 # runs per measurement; the median is reported
#   SHEAF=path                               # the sheaf binary (default target/release/sheaf)
#   SHEAF_BASELINE=path                      # another build measured in the same run, alternating
#                                            # run by run with SHEAF (before/after a change)
#   LEVELS=0                                 # skip the zstd level table (zstd -b alone, slow)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
SCALE=${SCALE:-1}
REPEAT=${REPEAT:-3}
sheaf=${SHEAF:-$PWD/target/release/sheaf}
base=${SHEAF_BASELINE:-}
cores=$(nproc)

pgbin=$(pg_bin_dir)
for tool in zstd lz4 igzip; do
  command -v $tool >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zstd lz4 isal >/dev/null; break; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-bench.XXXXXX")
chmod 755 "$work"
pguser=postgres
id $pguser >/dev/null 2>&1 || useradd -r -m $pguser
cleanup() {
  as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -m immediate stop >/dev/null 2>&1 || true
  if [ -n "${BENCH_KEEP:-}" ]; then echo "bench-engine: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

port=$(free_port)
mkdir -p "$work/pgdata" "$work/sock" "$work/tpch" "$work/log"
[ "$(id -u)" -ne 0 ] || chown -R $pguser "$work/pgdata" "$work/sock" "$work/tpch" "$work/log"
echo "== scratch cluster on port $port, TPC-H scale $SCALE" >&2
as_pg "$pgbin/initdb" -D "$work/pgdata" --data-checksums -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -l "$work/log/pg.log" -w \
  -o "-p $port -k $work/sock -c listen_addresses='' -c fsync=off -c max_wal_size=4GB" start >/dev/null
"$sheaf" load-tpch "postgres://postgres@localhost:$port/postgres?host=$work/sock" --scale "$SCALE" 2>/dev/null
as_pg psql -q -h "$work/sock" -p "$port" -U postgres -d postgres -c "DROP TABLE region, nation, part, supplier, partsupp, customer, orders; CHECKPOINT"
as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -w stop >/dev/null
rm -rf "$work/tpch"
data_bytes=$(du -sb "$work/pgdata" | cut -f1)
echo "== data directory: $((data_bytes / 1000000)) MB of PostgreSQL files" >&2

# The same bytes, concatenated, for the reference tools; and everything warm in the page cache.
find "$work/pgdata" -type f -print0 | sort -z | xargs -0 cat > "$work/all.bin"
cat "$work/all.bin" > /dev/null

mbps() { python3 -c "import json,sys; r=json.load(sys.stdin); print(r['bytes_read']/r['seconds']/1e6)"; }

sheaf_nul() { # codec -> median MB/s; with a baseline, "sheaf baseline" medians, runs alternated
  local a="" b=""
  for _ in $(seq "$REPEAT"); do
    a="$a $("$sheaf" backup "$work/pgdata" --to nul -c "$1" --json | mbps)"
    [ -z "$base" ] || b="$b $("$base" backup "$work/pgdata" --to nul -c "$1" --json | mbps)"
  done
  echo "$(echo $a | tr ' ' '\n' | median)${base:+ $(echo $b | tr ' ' '\n' | median)}"
}
ref_zstd() { for _ in $(seq "$REPEAT"); do zstd -b1 -e1 -B1M -i2 "$work/all.bin" 2>&1 | tr '\r' '\n' | grep -oE '[0-9.]+ MB/s' | tail -2 | head -1 | cut -d' ' -f1; done | median; }
ref_lz4() { for _ in $(seq "$REPEAT"); do lz4 -b1 -B1048576 -i2 "$work/all.bin" 2>&1 | tr '\r' '\n' | grep -oE '[0-9.]+ MB/s' | tail -2 | head -1 | cut -d' ' -f1; done | median; }
ref_igzip() {
  for _ in $(seq "$REPEAT"); do
    python3 - "$work/all.bin" <<'PY'
import os, subprocess, sys, time
f = sys.argv[1]
t = time.perf_counter()
subprocess.run(["igzip", "-1", "-T", "1", "-c", f], stdout=subprocess.DEVNULL, check=True)
print(os.path.getsize(f) / (time.perf_counter() - t) / 1e6)
PY
  done | median
}

report=$work/report.md
{
  echo "### NUL target vs codec ceiling ($cores cores, TPC-H scale $SCALE lineitem, $((data_bytes / 1000000)) MB data directory, 1 MiB chunks, median of $REPEAT)"
  echo
  if [ -n "$base" ]; then
    echo "| codec | sheaf to nul (MB/s) | baseline to nul (MB/s) | sheaf / baseline | single-core reference (MB/s) | ceiling = $cores × reference | sheaf / ceiling |"
    echo "|---|---|---|---|---|---|---|"
  else
    echo "| codec | sheaf to nul (MB/s) | single-core reference (MB/s) | ceiling = $cores × reference | sheaf / ceiling |"
    echo "|---|---|---|---|---|"
  fi
  for pair in "lz4:ref_lz4:lz4 -b1 -B1M" "zstd:low:ref_zstd:zstd -b1 -B1M" "deflate:1:ref_igzip:igzip -1"; do
    codec=${pair%%:ref_*}; rest=${pair#*:ref_}; ref=ref_${rest%%:*}; label=${rest#*:}
    read -r s b <<< "$(sheaf_nul "$codec")"; r=$($ref)
    if [ -n "$base" ]; then
      python3 -c "s,b,r,c=$s,$b,$r,$cores; print(f'| $codec | {s:.0f} | {b:.0f} | {s/b:.3f} | {r:.0f} ($label) | {c*r:.0f} | {s/(c*r):.2f} |')"
    else
      python3 -c "s,r,c=$s,$r,$cores; print(f'| $codec | {s:.0f} | {r:.0f} ($label) | {c*r:.0f} | {s/(c*r):.2f} |')"
    fi
  done
  if [ "${LEVELS:-1}" != 0 ]; then
  echo
  echo "### zstd levels on the same pages (zstd -b, one core, 1 MiB blocks): where low/medium/high sit"
  echo
  echo "| level | ratio | compress MB/s | decompress MB/s |"
  echo "|---|---|---|---|"
  zstd -b1 -e12 -B1M -i1 "$work/all.bin" 2>&1 | python3 -c '
import re, sys
# zstd 1.5 prints each result line, then the level label ("\r 1#"), separated by carriage returns.
last, rows = None, {}
for part in re.split(r"[\r\n]", sys.stdin.read()):
    m = re.search(r"\(x?([\d.]+)\),\s*([\d.]+) MB/s\s*,\s*([\d.]+) MB/s", part)
    if m:
        last = m.groups()
    lvl = re.match(r"\s*(-?\d+)#\s*$", part)
    if lvl and last:
        rows[int(lvl.group(1))] = last
for lvl in sorted(rows):
    r, c, d = rows[lvl]
    print(f"| {lvl} | {r} | {c} | {d} |")
'
  fi
  echo
  echo "### Restore and memory (zstd:low, 2 stripes on local disk)"
  echo
  mkdir -p "$work/stripes"
  /usr/bin/time -f '%M' -o "$work/backup.rss" "$sheaf" backup "$work/pgdata" --to "$work/stripes/s1.sheaf" --to "$work/stripes/s2.sheaf" --json > "$work/backup.json"
  budget=$(python3 -c "import json; print(json.load(open('$work/backup.json'))['memory_budget_bytes'])")
  for i in $(seq "$REPEAT"); do
    if [ -n "$base" ]; then
      rm -rf "$work/restored"
      "$base" restore "$work/stripes/s1.sheaf" --to "$work/restored" --json >> "$work/restore.base.json"
    fi
    rm -rf "$work/restored"
    /usr/bin/time -f '%M' -o "$work/restore.rss.$i" "$sheaf" restore "$work/stripes/s1.sheaf" --to "$work/restored" --json
  done | python3 -c "import json,sys; print('\n'.join(str(json.loads(l)['bytes_written']/json.loads(l)['seconds']/1e6) for l in sys.stdin))" | median > "$work/restore.mbps"
  if [ -n "$base" ]; then
    python3 -c "import json,sys; print('\n'.join(str(json.loads(l)['bytes_written']/json.loads(l)['seconds']/1e6) for l in sys.stdin))" < "$work/restore.base.json" | median > "$work/restore.base.mbps"
  fi
  cmp <(cd "$work/pgdata" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum) \
      <(cd "$work/restored" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum) >/dev/null \
      && same="identical" || same="DIFFERENT"
  python3 - "$work" "$budget" <<'PY'
import json, sys, glob
work, budget = sys.argv[1], int(sys.argv[2])
b = json.load(open(f"{work}/backup.json"))
rss_b = int(open(f"{work}/backup.rss").read().split()[-1]) * 1024
rss_r = max(int(open(f).read().split()[-1]) * 1024 for f in glob.glob(f"{work}/restore.rss.*"))
rest = float(open(f"{work}/restore.mbps").read())
print("| measure | value |")
print("|---|---|")
print(f"| backup to disk | {b['bytes_read']/b['seconds']/1e6:.0f} MB/s, ratio {b['bytes_read']/b['bytes_written']:.2f} |")
print(f"| restore from disk | {rest:.0f} MB/s |")
import os
if os.path.exists(f"{work}/restore.base.mbps"):
    base = float(open(f"{work}/restore.base.mbps").read())
    print(f"| restore from disk, baseline (alternated) | {base:.0f} MB/s (sheaf / baseline {rest/base:.3f}) |")
print(f"| memory budget (buffer_count × buffer size) | {budget/2**20:.0f} MiB ({b['buffer_count']} × {b['transfer_size']//2**20} MiB) |")
print(f"| peak RSS, backup | {rss_b/2**20:.0f} MiB |")
print(f"| peak RSS, restore | {rss_r/2**20:.0f} MiB |")
PY
  echo
  echo "Restored data directory is $same to the source (md5 of all files in order)."
} | tee "$report"
