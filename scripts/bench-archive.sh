#!/usr/bin/env bash
# WAL archiving benchmark (not a test), issue 9. For each archiver, a fresh cluster under pgbench at
# full speed (synchronous_commit off, so WAL comes as fast as it can) for DURATION seconds with
# archive_mode on:
#   cp (the floor), sheaf wal-push (zstd:low) one segment per call (--parallel 1) and with
#   look-ahead (--parallel 4), pgBackRest archive-push (sync, zst level 1) and pgBackRest with
#   archive-async=y, process-max 2.
# Sampled every 0.5 s: .ready files pending (the archiver's lag). Reported: WAL segments written,
# segments archived per second during the run, the most .ready pending, host CPU busy %, pgbench tps.
# Then a bulk load (BULK_ROWS rows of ~300 bytes: about 2 GB of WAL) is written with archiving
# paused, and archiving switched back on: the backlog (.ready files) and the seconds until the
# archive holds all of it (catch-up, where look-ahead and async pushing matter). All that WAL is then recovered from each
# archive onto a base backup taken before the run: cp, sheaf wal-fetch without and with prefetch,
# pgBackRest archive-get (async, process-max 2); seconds until recovery ends. With cp, the same WAL
# is also replayed straight from pg_wal (no restore_command at all): the replay floor.
#
#   DURATION=60 SCALE=10 OUT=archive-report scripts/bench-archive.sh
#
# A sheaf mode with `@old` runs another build of sheaf, SHEAF_OLD, under the same conditions, so
# that a change is measured pairwise in one run:
#   SHEAF_OLD=/path/to/old/sheaf MODES="sheaf sheaf@old sheaf-ahead sheaf-ahead@old" scripts/bench-archive.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
DURATION=${DURATION:-60}
SCALE=${SCALE:-10}
BULK_ROWS=${BULK_ROWS:-6000000}
OUT=$(realpath -m "${OUT:-archive-report}")
MODES=${MODES:-cp sheaf sheaf-ahead pgbackrest pgbackrest-async}
sheaf=$PWD/target/release/sheaf
command -v pgbackrest >/dev/null || scripts/install-deps.sh
pgbin=$(pg_bin_dir)
[ -x "$sheaf" ] || cargo build --release --locked
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/sheaf-archbench.XXXXXX")
chmod 755 "$work"
id postgres >/dev/null 2>&1 || useradd -r -m postgres
cleanup() {
  for d in "$work"/*/data "$work"/*/rec; do as_pg "$pgbin/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true; done
  if [ -n "${BENCH_KEEP:-}" ]; then echo "bench-archive: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
echo "mode,wal_segments,archived_in_run,segments_per_s,max_ready,cpu_busy_pct,pgbench_tps,recovery_segments,recovery_s,backlog_segments,backlog_drain_s,replay_floor_crash_s,replay_floor_archive_s" > "$OUT/archive.csv"

for mode in $MODES; do
  d=$work/${mode/@/-}
  bin=$sheaf
  case $mode in
    sheaf*@old) bin=${SHEAF_OLD:?"$mode runs the build SHEAF_OLD names: set it"} ;;
  esac
  mkdir -p "$d/sock" "$d/arch" "$d/spool" "$d/log"
  chown -R postgres "$d"
  port=$(free_port)
  psql() { as_pg "$pgbin/psql" -X -qAt -h "$d/sock" -p "$port" -U postgres "$@"; }
  as_pg "$pgbin/initdb" -D "$d/data" -A trust -U postgres >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$d/data" -l "$d/log/pg.log" -w -o "-p $port -k $d/sock -c listen_addresses='' \
    -c max_wal_size=8GB -c shared_buffers=256MB -c synchronous_commit=off -c archive_mode=on" start >/dev/null
  # Set with ALTER SYSTEM, never -c: a command-line setting would win over the ALTER SYSTEM below.
  psql -c "ALTER SYSTEM SET archive_command = '/bin/true'" -c "SELECT pg_reload_conf()" >/dev/null
  url="postgres://postgres@localhost:$port/postgres?host=$d/sock"
  cat > "$d/pgbackrest.conf" <<EOF
[global]
repo1-path=$d/arch
compress-type=zst
compress-level=1
log-path=$d/log
lock-path=$d/log
spool-path=$d/spool
process-max=2
log-level-console=warn
[global:archive-push]
archive-async=$([ "$mode" = pgbackrest-async ] && echo y || echo n)
[global:archive-get]
archive-async=y
[bench]
pg1-path=$d/data
pg1-port=$port
pg1-socket-path=$d/sock
EOF
  chown postgres "$d/pgbackrest.conf"
  case $mode in
    cp) cmd="test ! -f $d/arch/%f && cp %p $d/arch/%f"; get="cp $d/arch/%f %p" ;;
    sheaf*) as_pg "$bin" init --repo "$d/arch/repo" "$url" >/dev/null
           n=$(case $mode in sheaf-ahead*) echo 4 ;; *) echo 1 ;; esac)
           cmd="$bin wal-push %p --repo $d/arch/repo --parallel $n"; get="$bin wal-fetch %f %p --repo $d/arch/repo --parallel $n" ;;
    pgbackrest*) as_pg pgbackrest --config="$d/pgbackrest.conf" --stanza=bench stanza-create >/dev/null
           cmd="pgbackrest --config=$d/pgbackrest.conf --stanza=bench archive-push %p"
           get="pgbackrest --config=$d/pgbackrest.conf --stanza=bench --pg1-path=$d/rec archive-get %f \"%p\"" ;;
  esac
  as_pg "$pgbin/pgbench" -h "$d/sock" -p "$port" -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
  psql -c CHECKPOINT
  as_pg "$pgbin/pg_basebackup" -h "$d/sock" -p "$port" -U postgres -D "$d/base" -X stream -c fast
  psql -c "ALTER SYSTEM SET archive_command = '$cmd'" -c "SELECT pg_reload_conf()" >/dev/null
  psql -c "SELECT pg_stat_reset_shared('archiver')" >/dev/null
  lsn0=$(psql -c "SELECT pg_current_wal_lsn()")
  read -r b0 t0 < <(busy)
  as_pg "$pgbin/pgbench" -h "$d/sock" -p "$port" -U postgres -n -c 2 -j 2 -T "$DURATION" postgres > "$d/pgbench.out" 2>&1 &
  bench=$!
  maxready=0
  while kill -0 $bench 2>/dev/null; do
    n=$(ls "$d/data/pg_wal/archive_status" | grep -c '\.ready$' || true)
    [ "$n" -gt "$maxready" ] && maxready=$n
    sleep 0.5
  done
  wait $bench || true
  read -r b1 t1 < <(busy)
  archived=$(psql -c "SELECT archived_count FROM pg_stat_archiver")
  segs=$(psql -c "SELECT ((pg_current_wal_lsn() - '$lsn0') / (16*1024*1024))::int")
  tps=$(awk '/^tps/ {print int($3)}' "$d/pgbench.out" | head -1)
  cpu=$(awk -v a="$b0" -v b="$b1" -v c="$t0" -v e="$t1" 'BEGIN {printf "%.0f", 100*(b-a)/(e-c)}')
  rate=$(awk -v a="$archived" -v t="$DURATION" 'BEGIN {printf "%.2f", a/t}')
  # WAL for recovery to chew on, then drain: everything archived before recovery is timed.
  # Catch-up: archiving paused (an empty archive_command: PostgreSQL keeps the WAL and waits) while
  # the bulk load writes, then switched back on; timed until the archive holds all of it.
  psql -c "ALTER SYSTEM SET archive_command = ''" -c "SELECT pg_reload_conf()" >/dev/null
  psql -c "CREATE TABLE bulk AS SELECT g, repeat(md5(g::text), 8) AS pad FROM generate_series(1, $BULK_ROWS) g" >/dev/null
  rec_segs=$(psql -c "SELECT ((pg_current_wal_lsn() - '$lsn0') / (16*1024*1024))::int")
  last=$(psql -c "SELECT pg_walfile_name(pg_switch_wal())")
  sleep 1
  backlog=$(ls "$d/data/pg_wal/archive_status" | grep -c '\.ready$' || true)
  s=$(date +%s.%N)
  psql -c "ALTER SYSTEM SET archive_command = '$cmd'" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 12000); do
    [ "$(psql -c "SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")" = t ] && break; sleep 0.05
  done
  drain_s=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b-a}')
  as_pg "$pgbin/pg_ctl" -D "$d/data" -m fast -w stop >/dev/null
  in_archive=$(find "$d/arch" -type f -name '0000000*' | wc -l)
  if [ "$in_archive" -lt "$rec_segs" ]; then
    echo "bench-archive: $mode archived only $in_archive files of $rec_segs segments: see $d/log" >&2; exit 1
  fi
  # Recovery of the run's WAL onto the base backup.
  rec_s=""
  if [ "$mode" != pgbackrest ]; then
    cp -a "$d/base" "$d/rec"
    rport=$(free_port)
    printf "restore_command = '%s'\narchive_mode = off\nport = %s\nunix_socket_directories = '%s'\n" "$get" "$rport" "$d/sock" >> "$d/rec/postgresql.auto.conf"
    touch "$d/rec/recovery.signal"; chown -R postgres "$d/rec"
    s=$(date +%s.%N)
    as_pg "$pgbin/pg_ctl" -D "$d/rec" -l "$d/log/rec.log" -w -t 3600 start >/dev/null
    until [ "$(as_pg "$pgbin/psql" -X -qAt -h "$d/sock" -p "$rport" -U postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; do sleep 0.1; done
    e=$(date +%s.%N)
    rec_s=$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.1f", b-a}')
    restored=$(grep -c 'restored log file' "$d/log/rec.log" || true)
    if [ "$restored" -lt $((rec_segs - 2)) ]; then
      echo "bench-archive: $mode recovery restored $restored of $rec_segs segments from the archive: see $d/log/rec.log" >&2; exit 1
    fi
    rows=$(as_pg "$pgbin/psql" -X -qAt -h "$d/sock" -p "$rport" -U postgres -c 'SELECT count(*) FROM bulk')
    if [ "$rows" != "$BULK_ROWS" ]; then
      echo "bench-archive: $mode recovery holds $rows of $BULK_ROWS rows: see $d/log/rec.log" >&2; exit 1
    fi
    as_pg "$pgbin/pg_ctl" -D "$d/rec" -m immediate -w stop >/dev/null
  fi
  # Replay floors: the same WAL already in pg_wal. "crash": no recovery.signal, crash recovery from
  # backup_label reads pg_wal to its end (no restartpoints on the way). "archive": recovery.signal
  # and restore_command = 'false', so PostgreSQL recovers from the archive as for the rows above,
  # each segment's restore_command costing one fork, and reads pg_wal when it fails.
  floor_s=""; afloor_s=""
  if [ "$mode" = cp ]; then
    for kind in crash archive; do
      rm -rf "$d/rec"; cp -a "$d/base" "$d/rec"
      cp "$d"/arch/0000000* "$d/rec/pg_wal/"
      rport=$(free_port)
      printf "archive_mode = off\nport = %s\nunix_socket_directories = '%s'\n" "$rport" "$d/sock" >> "$d/rec/postgresql.auto.conf"
      if [ $kind = archive ]; then echo "restore_command = 'false'" >> "$d/rec/postgresql.auto.conf"; touch "$d/rec/recovery.signal"; fi
      chown -R postgres "$d/rec"; sync
      s=$(date +%s.%N)
      as_pg "$pgbin/pg_ctl" -D "$d/rec" -l "$d/log/floor-$kind.log" -w -t 3600 start >/dev/null
      until [ "$(as_pg "$pgbin/psql" -X -qAt -h "$d/sock" -p "$rport" -U postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; do sleep 0.1; done
      t=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b-a}')
      if [ $kind = crash ]; then floor_s=$t; else afloor_s=$t; fi
      rows=$(as_pg "$pgbin/psql" -X -qAt -h "$d/sock" -p "$rport" -U postgres -c 'SELECT count(*) FROM bulk')
      if [ "$rows" != "$BULK_ROWS" ]; then
        echo "bench-archive: the $kind replay floor recovered $rows of $BULK_ROWS rows: see $d/log/floor-$kind.log" >&2; exit 1
      fi
      as_pg "$pgbin/pg_ctl" -D "$d/rec" -m immediate -w stop >/dev/null
    done
  fi
  echo "$mode,$segs,$archived,$rate,$maxready,$cpu,$tps,$rec_segs,$rec_s,$backlog,$drain_s,$floor_s,$afloor_s" | tee -a "$OUT/archive.csv"
  rm -rf "$d/base" "$d/rec" "$d/data"
done
echo "bench-archive: wrote $OUT/archive.csv" >&2
