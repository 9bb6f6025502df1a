#!/usr/bin/env bash
# A former primary put back as a standby of the new one (issue 39's goal), in one run: a primary
# and its streaming standby archive into one sheaf repository; the standby is promoted, about 5 %
# of the pages change on it and a few rows on the old primary (which is then stopped cleanly); the
# new primary is backed up (an incremental on the full taken before the promotion). Then, each on
# its own copy of the stopped former primary: `pg_rewind` against the running new primary, and
# `sheaf restore --repo --delta` of that backup. A full restore into an empty folder and `dd` with
# direct writes of the same bytes put them in scale. The cache is dropped before each (COLD=1, root).
#
#   SHEAF=target/release/sheaf SCALE=1 COLD=1 OUT=rewind-report scripts/bench-rewind.sh   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
OUT=${OUT:-rewind-report}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
W=$(mktemp -d /var/tmp/sheaf-rewind.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT"
. scripts/lib.sh
[ "$(id -u)" -eq 0 ] && chown postgres "$W"
mkdir -p "$W/a" "$W/sock" "$W/repo"
[ "$(id -u)" -eq 0 ] && chown postgres "$W/a" "$W/sock" "$W/repo"
PA=$((20000 + RANDOM % 20000)); PB=$((PA + 1))
url() { echo "postgres://postgres@localhost:$1/${2:-postgres}?host=$W/sock"; }
cleanup() {
  for d in a b a-sheaf; do "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/$d" -m immediate stop >/dev/null 2>&1 || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
"${AS_PG[@]}" "$PGBIN/initdb" -D "$W/a" --data-checksums -A trust -U postgres >/dev/null
cat >>"$W/a/postgresql.conf" <<EOF
port = $PA
unix_socket_directories = '$W/sock'
listen_addresses = ''
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
wal_keep_size = 4GB
archive_mode = on
archive_command = '$S wal-push %p --repo $W/repo'
EOF
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/a" -l "$W/sock/a.log" -w start >/dev/null

"${AS_PG[@]}" "$S" init --repo "$W/repo" "$(url $PA)" >/dev/null
psql_at $PA -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"${AS_PG[@]}" "$S" load-tpch "$(url $PA tpch)" --scale "$SCALE" >/dev/null
psql_at $PA -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"

# The full, then the standby (a copy of the primary streaming from it).
archive_now $PA
"${AS_PG[@]}" "$S" backup "$(url $PA)" --repo "$W/repo" --type full --json >"$W/full.json"
"${AS_PG[@]}" "$PGBIN/pg_basebackup" -h "$W/sock" -p $PA -U postgres -D "$W/b" -R -c fast
printf "\nport = %s\n" "$PB" >>"$W/b/postgresql.conf"
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/b" -l "$W/sock/b.log" -w start >/dev/null
lsn=$(psql_at $PA -c "SELECT pg_current_wal_lsn()")
until [ "$(psql_at $PB -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'")" = t ]; do sleep 0.2; done
# The split: the standby promoted and changed; the old primary writes a little more, then stops.
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/b" -w promote >/dev/null
change $PB 5 7
psql_at $PA -d tpch -c "UPDATE orders SET o_comment = o_comment WHERE o_orderkey % 5000 = 1" -c "CHECKPOINT"
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/a" -m fast -w stop >/dev/null
archive_now $PB
"${AS_PG[@]}" "$S" backup "$(url $PB)" --repo "$W/repo" --type incr --json >"$W/incr.json"
archive_now $PB
incr=$(field "$W/incr.json" "d['postgres']['repository_id']")
cp -a "$W/a" "$W/a-rewind"
cp -a "$W/a" "$W/a-sheaf"

timed rewind "${AS_PG[@]}" "$PGBIN/pg_rewind" --target-pgdata="$W/a-rewind" --source-server="host=$W/sock port=$PB user=postgres dbname=postgres"
timed sheaf_delta "${AS_PG[@]}" "$S" restore --repo "$W/repo" --to "$W/a-sheaf" --set "$incr" --target immediate --delta --json >"$W/delta.json"
timed full_restore "${AS_PG[@]}" "$S" restore --repo "$W/repo" --to "$W/fresh" --set "$incr" --target immediate --json >"$W/fresh.json"
mb=$(( $(du -sm "$W/fresh" | cut -f1) ))
timed dd dd if=/dev/zero of="$W/dd.out" bs=1M count="$mb" oflag=direct status=none
rm -f "$W/dd.out"
# The delta'd former primary starts and recovers to the backup's end (a check, untimed).
printf "\nport = %s\narchive_mode = off\n" "$((PB + 1))" >>"$W/a-sheaf/postgresql.auto.conf"
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$W/a-sheaf" -l "$W/sock/a-sheaf.log" -w -t 300 start >/dev/null
until [ "$(psql_at $((PB + 1)) -c "SELECT NOT pg_is_in_recovery()")" = t ]; do sleep 0.2; done
rows=$(psql_at $((PB + 1)) -d tpch -c "SELECT count(*) FROM orders")

ratio() { echo "scale=3; $1 / $2" | bc -l; }
{
  echo "# A former primary put back, TPC-H scale $SCALE, $(date -u +%F), $(nproc) cores, $("$PGBIN/postgres" --version), cache $([ "${COLD:-0}" = 1 ] && echo "dropped before each" || echo warm)"
  echo
  echo "| run | seconds | × pg_rewind | × sheaf's full restore |"
  echo "|---|---|---|---|"
  echo "| pg_rewind against the running new primary | ${T[rewind]} | 1 | $(ratio "${T[rewind]}" "${T[full_restore]}") |"
  echo "| sheaf restore --delta from the repository | ${T[sheaf_delta]} | $(ratio "${T[sheaf_delta]}" "${T[rewind]}") | $(ratio "${T[sheaf_delta]}" "${T[full_restore]}") |"
  echo "| sheaf restore into an empty folder | ${T[full_restore]} | $(ratio "${T[full_restore]}" "${T[rewind]}") | 1 |"
  echo "| dd oflag=direct, the same $mb MiB | ${T[dd]} | $(ratio "${T[dd]}" "${T[rewind]}") | $(ratio "${T[dd]}" "${T[full_restore]}") |"
  echo
  echo "Delta: $(field "$W/delta.json" "d['delta']")"
  echo "The delta'd former primary started and recovered: orders holds $rows rows."
} | tee "$OUT/rewind.md"
