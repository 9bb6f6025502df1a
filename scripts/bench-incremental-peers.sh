#!/usr/bin/env bash
# Incrementals against the peers issue 22 names, each pair on one cluster in one run, one run
# each, the page cache dropped before every timed operation:
#   PEER=pgbackrest  (PostgreSQL 15, Debian's pgBackRest 2.45, file-level incr): sheaf zstd:low
#                    against pgBackRest zst level 1, both with 2 processes; full, then incr after
#                    changing ~5 % of the pages.
#   PEER=basebackup  (PostgreSQL 18 from scripts/install-deps.sh): sheaf -c none against
#                    pg_basebackup -Fp (its incrementals are plain, uncompressed) with summarize_wal;
#                    full, then 6 incrementals of ~1 % each, then sheaf's chain restore against
#                    pg_combinebackup rebuilding the same chain.
#
#   PEER=pgbackrest SCALE=1 scripts/bench-incremental-peers.sh
#   PEER=basebackup SCALE=1 scripts/bench-incremental-peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
PEER=${PEER:-pgbackrest}
OUT=${OUT:-incr-peers-report}
case "$PEER" in
  pgbackrest) PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin} ;;
  basebackup) PGBIN=${PGBIN:-/opt/sheaf/postgresql-18/bin} ;;
  *) echo "PEER is pgbackrest or basebackup" >&2; exit 2 ;;
esac
W=$(mktemp -d /var/tmp/sheaf-peers.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT" "$W/data" "$W/sock" "$W/repo" "$W/br" "$W/bb"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$W/data" "$W/sock" "$W/repo" "$W/br"
PORT=$((20000 + RANDOM % 20000))
URL="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
TPCH="postgres://postgres@localhost:$PORT/tpch?host=$W/sock"
cleanup() { as_pg "$PGBIN/pg_ctl" -D "$W/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
as_pg "$PGBIN/initdb" -D "$W/data" --data-checksums -A trust -U postgres >/dev/null
ARCHIVE="$S wal-push %p --repo $W/repo"
cat >"$W/pgbackrest.conf" <<EOF
[global]
repo1-path=$W/br
log-level-console=error
log-level-file=off
start-fast=y
compress-type=zst
compress-level=1
process-max=2
[bench]
pg1-path=$W/data
pg1-socket-path=$W/sock
pg1-port=$PORT
EOF
chmod 644 "$W/pgbackrest.conf"
BR="pgbackrest --config=$W/pgbackrest.conf --stanza=bench"
[ "$PEER" = pgbackrest ] && ARCHIVE="$ARCHIVE && $BR archive-push %p"
cat >>"$W/data/postgresql.conf" <<EOF
port = $PORT
unix_socket_directories = '$W/sock'
listen_addresses = ''
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
archive_mode = on
archive_command = '$ARCHIVE'
EOF
[ "$PEER" = basebackup ] && echo "summarize_wal = on" >>"$W/data/postgresql.conf"
as_pg "$PGBIN/pg_ctl" -D "$W/data" -l "$W/sock/log" -w start >/dev/null
psql() { as_pg "$PGBIN/psql" -h "$W/sock" -p "$PORT" -U postgres -Atq "$@"; }
"$S" init --repo "$W/repo" "$URL" >/dev/null
[ "$PEER" = pgbackrest ] && as_pg $BR stanza-create >/dev/null
psql -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"$S" load-tpch "$TPCH" --scale "$SCALE" >/dev/null
psql -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"

now() { date +%s.%N; }
declare -A T
timed() { local n=$1; shift; sync; echo 3 >/proc/sys/vm/drop_caches; local t0; t0=$(now); "$@" >/dev/null; T[$n]=$(echo "$(now) - $t0" | bc -l); echo "$n: ${T[$n]} s" >&2; }
archive_now() {
  local seg; seg=$(psql -c "SELECT pg_logical_emit_message(false, 'bench', 'x')" -c "SELECT pg_walfile_name(pg_switch_wal())" | tail -1)
  for _ in $(seq 600); do
    local last; last=$(psql -c "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
    [[ "$last" > "$seg" || "$last" == "$seg" ]] && return; sleep 0.2
  done
  echo "archiving stalled" >&2; exit 1
}
# The same change as scripts/bench-incremental.sh: about $1 % of lineitem's and orders' pages.
change() {
  local pct=$1 off=$2
  for t in lineitem orders; do
    local col; col=$([ $t = lineitem ] && echo l_comment || echo o_comment)
    local pages; pages=$(psql -d tpch -c "SELECT relpages FROM pg_class WHERE relname = '$t'")
    local every; every=$(echo "scale=0; 200 / $pct" | bc)
    local run; run=$(echo "scale=0; $pages * $pct / 200" | bc)
    local from=$(( (pages * off / 100) % pages ))
    psql -d tpch -c "UPDATE $t SET $col = $col WHERE (ctid::text::point)[0]::bigint % $every = $off % $every OR (ctid::text::point)[0]::bigint BETWEEN $from AND $from + $run"
  done
  psql -d tpch -c "CHECKPOINT"
  archive_now
}
du_b() { du -sb "$1" | cut -f1; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }
sheaf_backup() { "$S" backup "$URL" --repo "$W/repo" --json "$@" >"$W/last.json"; }
held() { python3 -c "import json; print(json.load(open('$W/last.json'))['bytes_written'])"; }

archive_now
if [ "$PEER" = pgbackrest ]; then
  timed sheaf_full sheaf_backup --type full -c zstd:low --threads 2
  timed br_full as_pg $BR backup --type=full
  change 5 0
  timed sheaf_incr sheaf_backup --type incr -c zstd:low --threads 2
  sheaf_size=$(held)
  br_before=$(du_b "$W/br/backup")
  timed br_incr as_pg $BR backup --type=incr
  br_size=$(( $(du_b "$W/br/backup") - br_before ))
  {
    echo "# Incremental against pgBackRest $(pgbackrest version | cut -d' ' -f2) (file-level incr), TPC-H scale $SCALE, $("$PGBIN/postgres" --version), $(nproc) cores, cache dropped before each"
    echo
    echo "| | sheaf (zstd:low, 2 threads) | pgBackRest (zst:1, process-max 2) | pgBackRest ÷ sheaf |"
    echo "|---|---|---|---|"
    echo "| full backup, s | ${T[sheaf_full]} | ${T[br_full]} | $(ratio "${T[br_full]}" "${T[sheaf_full]}") |"
    echo "| incr after ~5 % of pages changed, s | ${T[sheaf_incr]} | ${T[br_incr]} | $(ratio "${T[br_incr]}" "${T[sheaf_incr]}") |"
    echo "| incr size, bytes | $sheaf_size | $br_size | $(ratio "$br_size" "$sheaf_size") |"
  } | tee "$OUT/pgbackrest.md"
else
  bb() { "$PGBIN/pg_basebackup" -h "$W/sock" -p "$PORT" -U postgres -Fp -c fast -D "$@"; }
  timed sheaf_full sheaf_backup --type full -c none --threads 2
  timed bb_full bb "$W/bb/0"
  change 5 0
  timed sheaf_incr sheaf_backup --type incr -c none --threads 2
  sheaf_size=$(held)
  timed bb_incr bb "$W/bb/1" --incremental="$W/bb/0/backup_manifest"
  bb_size=$(du_b "$W/bb/1")
  for i in 2 3 4 5 6; do
    change 1 $((i * 13))
    sheaf_backup --type incr -c none --threads 2
    bb "$W/bb/$i" --incremental="$W/bb/$((i - 1))/backup_manifest"
  done
  last=$(python3 -c "import json; print(json.load(open('$W/last.json'))['postgres']['repository_id'])")
  timed sheaf_chain "$S" restore --repo "$W/repo" --set "$last" --to "$W/r-sheaf" --target immediate
  timed combine "$PGBIN/pg_combinebackup" -o "$W/r-combined" "$W/bb/0" "$W/bb/1" "$W/bb/2" "$W/bb/3" "$W/bb/4" "$W/bb/5" "$W/bb/6"
  {
    echo "# Incremental against pg_basebackup --incremental and pg_combinebackup, TPC-H scale $SCALE, $("$PGBIN/postgres" --version), $(nproc) cores, cache dropped before each"
    echo
    echo "| | sheaf (-c none, 2 threads) | pg_basebackup -Fp / pg_combinebackup | peer ÷ sheaf |"
    echo "|---|---|---|---|"
    echo "| full backup, s | ${T[sheaf_full]} | ${T[bb_full]} | $(ratio "${T[bb_full]}" "${T[sheaf_full]}") |"
    echo "| incremental after ~5 % of pages changed, s | ${T[sheaf_incr]} | ${T[bb_incr]} | $(ratio "${T[bb_incr]}" "${T[sheaf_incr]}") |"
    echo "| incremental size, bytes | $sheaf_size | $bb_size | $(ratio "$bb_size" "$sheaf_size") |"
    echo "| full + 6 incrementals to a data directory, s (sheaf restore / pg_combinebackup) | ${T[sheaf_chain]} | ${T[combine]} | $(ratio "${T[combine]}" "${T[sheaf_chain]}") |"
  } | tee "$OUT/basebackup.md"
fi
