#!/usr/bin/env bash
# A new streaming standby, from nothing (issue 51's benchmark), one run each on one TPC-H cluster on
# this host, built three ways: sheaf from its repository (restore --standby), pg_basebackup -R from
# the primary, and pgBackRest's restore --type=standby from its repository. For each: the time
# from an empty folder to the primary's pg_stat_replication showing it streaming (the restore or
# copy, the start, replaying what it lacks), the page cache dropped first (COLD=1, the default),
# and the bytes the primary's server processes read from disk meanwhile (/proc/PID/io). The
# primary archives into both repositories; each repository has one full backup taken first.
#
#   SHEAF=target/release/sheaf SCALE=1 OUT=replica-report scripts/bench-replica.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
OUT=$(realpath -m "${OUT:-replica-report}")
# Debian's pgBackRest (2.45) serves PostgreSQL up to 15.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
command -v pgbackrest >/dev/null || scripts/install-deps.sh
W=$(mktemp -d /var/tmp/sheaf-replica.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT"
. scripts/lib.sh
mkdir -p "$W/p" "$W/sock" "$W/repo" "$W/pgbr-repo" "$W/spool"
[ "$(id -u)" -eq 0 ] && chown postgres "$W" "$W/p" "$W/sock" "$W/repo" "$W/pgbr-repo" "$W/spool"
chmod 700 "$W/p"
PORT=$((20000 + RANDOM % 20000))
P="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
cleanup() {
  for d in p sheaf pgbb pgbr; do as_pg "$PGBIN/pg_ctl" -D "$W/$d" -m immediate stop >/dev/null 2>&1 || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
cat >"$W/pgbackrest.conf" <<EOF
[global]
repo1-path=$W/pgbr-repo
repo1-retention-full=2
spool-path=$W/spool
log-level-console=warn
log-path=$W/spool
lock-path=$W/spool
start-fast=y
compress-type=lz4
process-max=2

[bench]
pg1-path=$W/p
pg1-socket-path=$W/sock
pg1-port=$PORT
EOF
chmod 644 "$W/pgbackrest.conf"
PGBR=(pgbackrest "--config=$W/pgbackrest.conf" --stanza=bench)
start_primary "$W/p" "$PORT" "$S wal-push %p --repo $W/repo && pgbackrest --config=$W/pgbackrest.conf --stanza=bench archive-push %p" "$W/sock/p.log"
psql() { local port=$1; shift; as_pg "$PGBIN/psql" -h "$W/sock" -p "$port" -U postgres -Atq "$@"; }
as_pg "$S" init --repo "$W/repo" "$P" >/dev/null
as_pg "${PGBR[@]}" stanza-create >/dev/null
psql "$PORT" -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
as_pg "$S" load-tpch "postgres://postgres@localhost:$PORT/tpch?host=$W/sock" --scale "$SCALE" >/dev/null
psql "$PORT" -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"
echo "backing up into both repositories" >&2
as_pg "$S" backup "$P" --repo "$W/repo" >/dev/null
as_pg "${PGBR[@]}" --type=full backup >/dev/null
# Written after the backups: each standby replays it (from its archive, or streamed).
psql "$PORT" -d tpch -c "CREATE TABLE after_backup AS SELECT * FROM orders LIMIT 100000" -c "SELECT pg_switch_wal()" >/dev/null
ROWS=$(psql "$PORT" -d tpch -c "SELECT count(*) FROM lineitem")
AFTER=$(psql "$PORT" -d tpch -c "SELECT count(*) FROM after_backup")

# The time to write a standby's bytes (sheaf's, as restored) once, direct: the floor of any copy.
dd_limit() {
  local bytes t0; bytes=$(du -sb "$W/sheaf" | cut -f1); t0=$(now)
  dd if=/dev/zero of="$W/dd.out" bs=4M count=$(( bytes / 4194304 + 1 )) oflag=direct status=none
  printf '%.2f' "$(echo "$(now) - $t0" | bc -l)"
  rm -f "$W/dd.out"
}
cold() { sync; if [ "${COLD:-1}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
# Bytes the primary's server processes (the postmaster and its children) have read from disk.
primary_reads() { server_reads "$W/p"; }
conninfo() { echo "host=$W/sock port=$PORT user=postgres application_name=$1"; }
streaming() {
  until [ "$(psql "$PORT" -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$1' AND state = 'streaming'")" = 1 ]; do sleep 0.05; done
}
start() { # NAME PORT: on its own port, started, streaming.
  printf 'port = %s\n' "$2" >>"$W/$1/postgresql.auto.conf"
  as_pg "$PGBIN/pg_ctl" -D "$W/$1" -l "$W/sock/$1.log" -w -t 600 start >/dev/null
  streaming "$1"
}
declare -A T R C
measure() { # NAME PORT COMMAND...: from an empty folder to streaming.
  local n=$1 port=$2; shift 2
  mkdir -p "$W/$n"; [ "$(id -u)" -eq 0 ] && chown postgres "$W/$n"; chmod 700 "$W/$n"
  cold
  local r0 t0 t1; r0=$(primary_reads); t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  start "$n" "$port"
  T[$n]=$(echo "$(now) - $t0" | bc -l); R[$n]=$(( $(primary_reads) - r0 )); C[$n]=$(echo "$t1 - $t0" | bc -l)
  local rows; rows=$(psql "$port" -d tpch -c "SELECT count(*) FROM lineitem")
  [ "$rows" = "$ROWS" ] || { echo "$n: lineitem has $rows rows, not $ROWS" >&2; exit 1; }
  [ "$(psql "$port" -d tpch -c "SELECT count(*) FROM after_backup")" = "$AFTER" ] || { echo "$n: after_backup incomplete" >&2; exit 1; }
  echo "$n: ${T[$n]} s to streaming, the primary read ${R[$n]} bytes" >&2
}
measure sheaf $((PORT + 1)) as_pg "$S" restore --repo "$W/repo" --to "$W/sheaf" --standby --primary-conninfo "$(conninfo sheaf)"
measure pgbb $((PORT + 2)) as_pg "$PGBIN/pg_basebackup" -h "$W/sock" -p "$PORT" -U postgres -D "$W/pgbb" -R -X stream -c fast -d "$(conninfo pgbb)"
measure pgbr $((PORT + 3)) as_pg "${PGBR[@]}" --pg1-path="$W/pgbr" restore --type=standby --recovery-option="primary_conninfo=$(conninfo pgbr)"
{
  echo "# A streaming standby from nothing: TPC-H scale $SCALE, $(date -u +%F), $($PGBIN/postgres --version), $(pgbackrest version)"
  echo
  echo "Cache dropped before each (COLD=${COLD:-1}); one run each, in this order; each timed from an empty folder to the"
  echo "primary's pg_stat_replication showing it streaming; lineitem's rows and a table written after the backups checked."
  echo
  echo "| built by | seconds to streaming | of which the restore or copy | × pg_basebackup's time | the primary's server read (bytes) |"
  echo "|---|---|---|---|---|"
  for n in sheaf pgbb pgbr; do
    [ -n "${T[$n]:-}" ] || continue
    printf '| %s | %.2f | %.2f | %.2f | %s |\n' "$n" "${T[$n]}" "${C[$n]}" "$(echo "${T[$n]} / ${T[pgbb]}" | bc -l)" "${R[$n]}"
  done
  echo
  echo "The disk's limit beside them: the standby's $(du -sb "$W/sheaf" | cut -f1) bytes written once with dd oflag=direct: $(dd_limit) s."
} | tee "$OUT/replica.md"
