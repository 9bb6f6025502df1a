#!/usr/bin/env bash
# Peer benchmark (not a test): on one TPC-H cluster, sheaf (zstd:low, lz4; 2 local stripes) against
# pg_basebackup (-Ft --compress=server-zstd:level=1,workers=N and --compress=lz4) and pgBackRest
# (--compress-type=zst --compress-level=1 --process-max=N, and lz4): backup seconds, size, restore
# seconds, each the median of REPEAT runs. Warm cache; every operation starts with nothing dirty
# and is timed until durable (sync). Prints a Markdown report.
#
#   SCALE=1 REPEAT=3 scripts/bench-peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
SCALE=${SCALE:-1}
REPEAT=${REPEAT:-3}
sheaf=$PWD/target/release/sheaf
N=$(nproc)

command -v pgbackrest >/dev/null || { apt-get update -qq; apt-get install -y -qq pgbackrest >/dev/null; }
command -v zstd >/dev/null && command -v lz4 >/dev/null || apt-get install -y -qq zstd lz4 >/dev/null
pgbin=$(pg_bin_dir)

work=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-peers.XXXXXX")
chmod 755 "$work"
cleanup() {
  as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -m immediate stop >/dev/null 2>&1 || true
  [ -n "${BENCH_KEEP:-}" ] && echo "bench-peers: kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work"/{pgdata,sock,repo,log,lock,out}
[ "$(id -u)" -ne 0 ] || chown -R postgres "$work"
port=$(free_port)
conf=$work/pgbackrest.conf
cat > "$conf" <<CONF
[global]
repo1-path=$work/repo
log-path=$work/log
lock-path=$work/lock
log-level-console=warn
start-fast=y
[bench]
pg1-path=$work/pgdata
pg1-port=$port
pg1-socket-path=$work/sock
CONF
chmod 644 "$conf"
pgbr() { as_pg pgbackrest --config="$conf" --stanza=bench "$@"; }

echo "== cluster on port $port, TPC-H scale $SCALE" >&2
as_pg "$pgbin/initdb" -D "$work/pgdata" --data-checksums -A trust -U postgres >/dev/null
cat >> "$work/pgdata/postgresql.conf" <<PGCONF
port = $port
unix_socket_directories = '$work/sock'
listen_addresses = ''
max_wal_size = 4GB
archive_mode = on
archive_command = 'pgbackrest --config=$conf --stanza=bench archive-push %p'
PGCONF
as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -l "$work/log/pg.log" -w start >/dev/null
url="postgres://postgres@localhost:$port/postgres?host=$work/sock"
"$sheaf" load-tpch "$url" --scale "$SCALE" 2>/dev/null
as_pg psql -q -h "$work/sock" -p "$port" -U postgres -c "VACUUM ANALYZE" -c "CHECKPOINT" -c "SELECT pg_switch_wal()" postgres
pgbr stanza-create >/dev/null
data_mb=$(( ($(du -sb "$work/pgdata" | cut -f1) - $(du -sb "$work/pgdata/pg_wal" | cut -f1)) / 1000000 ))
echo "== data directory without pg_wal: $data_mb MB" >&2

now() { date +%s.%N; }
# The load leaves a backlog of WAL for archive-push (pgBackRest's archiving needs archive_mode):
# measuring while the archiver compresses it would charge its CPU to whichever tool runs first.
archiver_idle() {
  local i=0
  while ls "$work"/pgdata/pg_wal/archive_status/*.ready >/dev/null 2>&1; do
    sleep 0.5; i=$((i + 1)); [ $i -lt 1200 ] || { echo "bench-peers: the archiver never caught up" >&2; exit 1; }
  done
}
results=$work/results.tsv
: > "$results"

# run NAME BACKUP_CMD RESTORE_CMD SIZE_PATH: REPEAT times, fresh output each time.
run() {
  local name=$1 backup=$2 restore=$3 size_path=$4
  for i in $(seq "$REPEAT"); do
    rm -rf "$work/out" "$work/restored"; mkdir -p "$work/out"; [ "$(id -u)" -ne 0 ] || chown postgres "$work/out"
    [ "$name" = "${name#pgbackrest}" ] || { pgbr expire --repo1-retention-full=1 >/dev/null 2>&1 || true; rm -rf "$work/repo/backup/bench/"2*; }
    # Each operation starts with nothing dirty and ends durable (sync), so that no run pays for
    # the previous one's writeback and a tool that does not fsync (tar) is not flattered.
    archiver_idle; sync; t0=$(now); eval "$backup" >/dev/null 2>"$work/log/err"; sync; t1=$(now)
    size=$(du -sb $size_path | awk '{s+=$1} END {print s}')
    mkdir -p "$work/restored"; chmod 700 "$work/restored"; [ "$(id -u)" -ne 0 ] || chown postgres "$work/restored"
    archiver_idle; sync; t2=$(now); eval "$restore" >/dev/null 2>>"$work/log/err"; sync; t3=$(now)
    [ -f "$work/restored/PG_VERSION" ] || { echo "bench-peers: $name restore produced no data directory" >&2; cat "$work/log/err" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$size" "$(echo "$t3 - $t2" | bc)" >> "$results"
  done
}

run "sheaf zstd:low" \
  "$sheaf backup '$url' --to $work/out/s1.sheaf --to $work/out/s2.sheaf -c zstd:low" \
  "rm -rf $work/restored && $sheaf restore $work/out/s1.sheaf --to $work/restored" "$work/out"
run "sheaf lz4" \
  "$sheaf backup '$url' --to $work/out/s1.sheaf --to $work/out/s2.sheaf -c lz4" \
  "rm -rf $work/restored && $sheaf restore $work/out/s1.sheaf --to $work/restored" "$work/out"
run "pg_basebackup server-zstd:1 workers=$N" \
  "as_pg $pgbin/pg_basebackup -h $work/sock -p $port -U postgres -D $work/out/bb -Ft -X fetch -c fast --compress=server-zstd:level=1,workers=$N" \
  "zstd -dc $work/out/bb/base.tar.zst | tar -x -C $work/restored" "$work/out"
run "pg_basebackup lz4 (client)" \
  "as_pg $pgbin/pg_basebackup -h $work/sock -p $port -U postgres -D $work/out/bb -Ft -X fetch -c fast --compress=lz4" \
  "lz4 -dc $work/out/bb/base.tar.lz4 | tar -x -C $work/restored" "$work/out"
run "pgbackrest zst:1 process-max=$N" \
  "pgbr backup --type=full --compress-type=zst --compress-level=1 --process-max=$N" \
  "pgbr restore --pg1-path=$work/restored --process-max=$N" "$work/repo/backup/bench/2*"
run "pgbackrest lz4 process-max=$N" \
  "pgbr backup --type=full --compress-type=lz4 --process-max=$N" \
  "pgbr restore --pg1-path=$work/restored --process-max=$N" "$work/repo/backup/bench/2*"

python3 - "$results" "$data_mb" "$SCALE" "$REPEAT" "$N" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
data_mb, scale, repeat, n = float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
tools = list(dict.fromkeys(r[0] for r in rows))
med = {}
print(f"### sheaf vs pg_basebackup vs pgBackRest: TPC-H scale {scale}, {data_mb:.0f} MB data directory (without pg_wal), {n} cores, median of {repeat} (min-max)\n")
print("| tool | backup s | backup MB/s | size MB | ratio | restore s |")
print("|---|---|---|---|---|---|")
for t in tools:
    b = [float(r[1]) for r in rows if r[0] == t]; s = [int(r[2]) for r in rows if r[0] == t]; r_ = [float(r[3]) for r in rows if r[0] == t]
    med[t] = (st.median(b), st.median(s), st.median(r_))
    print(f"| {t} | {med[t][0]:.2f} ({min(b):.2f}-{max(b):.2f}) | {data_mb/med[t][0]:.0f} | {med[t][1]/1e6:.0f} | {data_mb*1e6/med[t][1]:.2f} | {med[t][2]:.2f} ({min(r_):.2f}-{max(r_):.2f}) |")
def ratio(a, b, i):
    return med[b][i] / med[a][i]
print()
for codec, bb, br in [("zstd:low", [t for t in tools if "server-zstd" in t][0], [t for t in tools if "zst:1" in t][0]),
                      ("lz4", [t for t in tools if "lz4 (client)" in t][0], [t for t in tools if "pgbackrest lz4" in t][0])]:
    s = f"sheaf {codec}"
    print(f"- sheaf {codec}: backup throughput {ratio(s, bb, 0):.1f}x pg_basebackup and {ratio(s, br, 0):.1f}x pgBackRest; "
          f"size {med[s][1]/med[bb][1]:.2f}x pg_basebackup's and {med[s][1]/med[br][1]:.2f}x pgBackRest's; "
          f"restore {ratio(s, br, 2):.1f}x pgBackRest ({ratio(s, bb, 2):.1f}x pg_basebackup's tar extract)")
PY
