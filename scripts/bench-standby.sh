#!/usr/bin/env bash
# Backups off the primary (issue 23's first goal), one run each on one TPC-H cluster and its
# streaming standby on this host: the same full backup into the same repository taken on the
# primary, on the standby, and hybrid (started on the primary, files from the standby). For each:
# the time (cache dropped first with COLD=1, the default), the bytes the primary's server
# processes read from disk meanwhile (/proc/PID/io read_bytes), and, in a second untimed run under
# strace, the files sheaf opened under the primary's data directory. Each backup is then restored
# alone and started, and lineitem's count checked against the primary's.
#
#   SHEAF=target/release/sheaf SCALE=1 OUT=standby-report scripts/bench-standby.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
OUT=$(realpath -m "${OUT:-standby-report}")
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
W=$(mktemp -d /var/tmp/sheaf-standby.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT"
. scripts/lib.sh
mkdir -p "$W/p" "$W/s" "$W/sock" "$W/repo"
[ "$(id -u)" -eq 0 ] && chown postgres "$W/p" "$W/s" "$W/sock" "$W/repo"
chmod 700 "$W/p" "$W/s"
PORT=$((20000 + RANDOM % 20000)); SPORT=$((PORT + 1))
P="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
SB="postgres://postgres@localhost:$SPORT/postgres?host=$W/sock"
cleanup() {
  for d in p s r; do as_pg "$PGBIN/pg_ctl" -D "$W/$d" -m immediate stop >/dev/null 2>&1 || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
start_primary "$W/p" "$PORT" "$S wal-push %p --repo $W/repo" "$W/sock/p.log"
psql() { local port=$1; shift; as_pg "$PGBIN/psql" -h "$W/sock" -p "$port" -U postgres -Atq "$@"; }
"${AS_PG[@]}" "$S" init --repo "$W/repo" "$P" >/dev/null
psql "$PORT" -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"$S" load-tpch "postgres://postgres@localhost:$PORT/tpch?host=$W/sock" --scale "$SCALE" >/dev/null
psql "$PORT" -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"
as_pg "$PGBIN/pg_basebackup" -h "$W/sock" -p "$PORT" -U postgres -D "$W/s" -R -X stream -c fast
echo "port = $SPORT" >>"$W/s/postgresql.conf"
as_pg "$PGBIN/pg_ctl" -D "$W/s" -l "$W/sock/s.log" -w start >/dev/null
LSN=$(psql "$PORT" -c "SELECT pg_current_wal_insert_lsn()")
until [ "$(psql "$SPORT" -c "SELECT pg_last_wal_replay_lsn() >= '$LSN'")" = t ]; do sleep 0.2; done
psql "$SPORT" -c "CHECKPOINT"
ROWS=$(psql "$PORT" -d tpch -c "SELECT count(*) FROM lineitem")

cold() { sync; if [ "${COLD:-1}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
# Bytes the primary's server processes (the postmaster and its children) have read from disk.
primary_reads() { server_reads "$W/p"; }
declare -A T R O B
run() {
  local n=$1; shift
  cold
  local r0 t0; r0=$(primary_reads); t0=$(now)
  "${AS_PG[@]}" "$S" backup "$@" --repo "$W/repo" --json >"$OUT/$n.json"
  T[$n]=$(echo "$(now) - $t0" | bc -l); R[$n]=$(( $(primary_reads) - r0 ))
  B[$n]=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$OUT/$n.json")
  # Again under strace, untimed: every file sheaf opened under the primary's data directory.
  strace -f -qq -e trace=openat,open -o "$W/$n.strace" "${AS_PG[@]}" "$S" backup "$@" --repo "$W/repo" --json >/dev/null
  O[$n]=$(grep -c "\"$W/p/" "$W/$n.strace" || true)
  echo "$n: ${T[$n]} s, primary read ${R[$n]} bytes, sheaf opened ${O[$n]} files under the primary's data directory" >&2
}
run primary "$P"
run standby "$SB"
run hybrid --primary "$P" --standby "$SB"

# Each restored alone, started, and counted.
restored() {
  local id; id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['postgres']['repository_id'])" "$OUT/$1.json")
  # A folder per backup: the stopped server's WAL prefetcher may still be tidying the last one's
  # pg_wal for a few seconds (it ends once recovery has asked for nothing new for a while).
  local r=$W/r-$1
  "$S" restore --repo "$W/repo" --set "$id" --target immediate --to "$r" >/dev/null
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$r"
  printf 'port = %s\narchive_mode = off\n' $((PORT + 2)) >>"$r/postgresql.auto.conf"
  as_pg "$PGBIN/pg_ctl" -D "$r" -l "$W/sock/r.log" -w -t 300 start >/dev/null
  until [ "$(psql $((PORT + 2)) -c "SELECT pg_is_in_recovery()")" = f ]; do sleep 0.2; done
  local rows; rows=$(psql $((PORT + 2)) -d tpch -c "SELECT count(*) FROM lineitem")
  as_pg "$PGBIN/pg_ctl" -D "$r" -m fast -w stop >/dev/null
  [ "$rows" = "$ROWS" ] && echo "started, lineitem $rows rows" || echo "lineitem $rows rows, not $ROWS"
}
{
  echo "# Backups off the primary: TPC-H scale $SCALE, $(date -u +%F), $($PGBIN/postgres --version)"
  echo
  echo "Cache dropped before each backup (COLD=${COLD:-1}); zstd:low, 1 stripe, into one repository; one run each."
  echo
  echo "| taken | seconds | source MiB | MiB/s | × primary's speed | primary's server read (bytes) | files sheaf opened under the primary's data dir | restored alone |"
  echo "|---|---|---|---|---|---|---|---|"
  for n in primary standby hybrid; do
    mibs=$(echo "${B[$n]} / 1048576 / ${T[$n]}" | bc -l)
    ratio=$(echo "${T[primary]} / ${T[$n]}" | bc -l)
    printf '| %s | %.2f | %.0f | %.0f | %.2f | %s | %s | %s |\n' "$n" "${T[$n]}" "$(echo "${B[$n]} / 1048576" | bc -l)" "$mibs" "$ratio" "${R[$n]}" "${O[$n]}" "$(restored "$n")"
  done
} | tee "$OUT/standby.md"
