#!/usr/bin/env bash
# Incremental backups on TPC-H (issue 22's goals), one run on one cluster, sheaf against itself:
# a full; a differential from the WAL summaries and one from the page scan after changing ~5 % of
# the pages; a chain of a full and 6 incrementals restored against a full restore of the same end
# state (its consolidation); --delta restore of a stale copy; consolidate against a full backup.
# Every backup and restore starts after sync, with a warm cache (COLD=1: the page cache dropped). Peers (pgBackRest incr,
# pg_basebackup --incremental) come with `sheaf bench --type full,incr`.
#
#   SHEAF=target/release/sheaf SCALE=1 OUT=incr-report scripts/bench-incremental.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
OUT=${OUT:-incr-report}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
W=$(mktemp -d /var/tmp/sheaf-incr.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT"
. scripts/lib.sh
# sheaf runs as the cluster's user (it refuses a repository another user owns); the script stays
# root where it is, to drop the page cache.
[ "$(id -u)" -eq 0 ] && chown postgres "$W"
mkdir -p "$W/data" "$W/sock" "$W/repo"
[ "$(id -u)" -eq 0 ] && chown postgres "$W/data" "$W/sock" "$W/repo"
PORT=$((20000 + RANDOM % 20000))
URL="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
TPCH="postgres://postgres@localhost:$PORT/tpch?host=$W/sock"
# KEEP=1: the repository and restores stay in $W for a closer look (the server is stopped).
cleanup() { as_pg "$PGBIN/pg_ctl" -D "$W/data" -m immediate stop >/dev/null 2>&1 || true; if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
start_primary "$W/data" "$PORT" "$S wal-push %p --repo $W/repo"
psql() { psql_at "$PORT" "$@"; }
"${AS_PG[@]}" "$S" init --repo "$W/repo" "$URL" >/dev/null
psql -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"${AS_PG[@]}" "$S" load-tpch "$TPCH" --scale "$SCALE" >/dev/null
psql -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"

backup() { "${AS_PG[@]}" "$S" backup "$URL" --repo "$W/repo" --json "$@"; }

archive_now "$PORT"
timed full backup --type full >"$W/full.json"
change "$PORT" 5 0
# Peak resident memory of the incremental, against the budget it prints.
timed diff_wal /usr/bin/time -f %M -o "$W/diff_wal.rss" "${AS_PG[@]}" "$S" backup "$URL" --repo "$W/repo" --json --type diff >"$W/diff_wal.json"
timed diff_scan backup --type diff --page-scan >"$W/diff_scan.json"
# A chain: 6 incrementals of about 1 % each.
for i in 1 2 3 4 5 6; do
  change "$PORT" 1 $((i * 13))
  timed "incr$i" backup --type incr >"$W/incr$i.json"
done
last=$(field "$W/incr6.json" "d['postgres']['repository_id']")
full_id=$(field "$W/full.json" "d['postgres']['repository_id']")
timed consolidate "${AS_PG[@]}" "$S" consolidate --repo "$W/repo" --set "$last" --json >"$W/merged.json"
merged=$(field "$W/merged.json" "d['record']['id']")
restore() { local to=$1; shift; rm -rf "$to"; "${AS_PG[@]}" "$S" restore --repo "$W/repo" --to "$to" --target immediate --json "$@" >/dev/null; }
timed restore_merged restore "$W/r-merged" --set "$merged"
timed restore_chain restore "$W/r-chain" --set "$last"
diff -rq --exclude=postgresql.auto.conf "$W/r-merged" "$W/r-chain" >/dev/null && same=yes || same=no
# Delta: the full's state, made equal to the chain's end.
restore "$W/r-stale" --set "$full_id"
timed delta "${AS_PG[@]}" "$S" restore --repo "$W/repo" --to "$W/r-stale" --set "$last" --target immediate --delta --json >"$W/delta.json"
# The same by hashing the target (--delta=hash), onto the full's state again.
restore "$W/r-stale" --set "$full_id"
timed delta_hash "${AS_PG[@]}" "$S" restore --repo "$W/repo" --to "$W/r-stale" --set "$last" --target immediate --delta=hash --json >"$W/delta_hash.json"
# The disk's limit for a full restore's bytes: dd with direct writes, same size, same folder.
mb=$(( $(du -sm "$W/r-merged" | cut -f1) ))
timed dd dd if=/dev/zero of="$W/dd.out" bs=1M count="$mb" oflag=direct status=none
rm -f "$W/dd.out"

size() { field "$W/$1.json" "d['bytes_written']"; }
read_() { field "$W/$1.json" "d['bytes_read']"; }
ratio() { echo "scale=3; $1 / $2" | bc -l; }
{
  echo "# Incremental backups, TPC-H scale $SCALE, $(date -u +%F), $(nproc) cores, $("$PGBIN/postgres" --version), cache $([ "${COLD:-0}" = 1 ] && echo "dropped before each" || echo warm)"
  echo
  echo "| run | seconds | × full backup | bytes read | bytes written | × full's size |"
  echo "|---|---|---|---|---|---|"
  for n in full diff_wal diff_scan incr1 incr6; do
    echo "| $n | ${T[$n]} | $(ratio "${T[$n]}" "${T[full]}") | $(read_ $n) | $(size $n) | $(ratio "$(size $n)" "$(size full)") |"
  done
  echo "| consolidate (full + 6 incr) | ${T[consolidate]} | $(ratio "${T[consolidate]}" "${T[full]}") | | | |"
  echo
  echo "| restore | seconds | × full restore of the same end state |"
  echo "|---|---|---|"
  echo "| full (the consolidation) | ${T[restore_merged]} | 1 |"
  echo "| chain: full + 6 incrementals | ${T[restore_chain]} | $(ratio "${T[restore_chain]}" "${T[restore_merged]}") |"
  echo "| --delta onto the full's state (from the WAL) | ${T[delta]} | $(ratio "${T[delta]}" "${T[restore_merged]}") |"
  echo "| --delta=hash onto the full's state | ${T[delta_hash]} | $(ratio "${T[delta_hash]}" "${T[restore_merged]}") |"
  echo "| dd oflag=direct, the same $mb MiB | ${T[dd]} | $(ratio "${T[dd]}" "${T[restore_merged]}") |"
  echo
  echo "Consolidation copied $(field "$W/merged.json" "d['stored_chunks']") of $(field "$W/merged.json" "d['frames']") frames as stored, keeping $(field "$W/merged.json" "d['superseded_bytes']") bytes that newer backups replaced; it wrote $(size merged) bytes ($(ratio "$(size merged)" "$(size full)") × the full's)."
  echo "Chain and consolidation restore to identical files: $same. Delta: $(field "$W/delta.json" "d['delta']")"
  echo "Delta by hashing: $(field "$W/delta_hash.json" "d['delta']")"
  echo "diff_wal method: $(field "$W/diff_wal.json" "d['postgres']['method']")"
  echo "diff_wal memory: peak RSS $(( $(cat "$W/diff_wal.rss") / 1024 )) MiB; printed budget $(( $(field "$W/diff_wal.json" "d['memory_budget_bytes']") / 1048576 )) MiB (buffers × transfer size)"
} | tee "$OUT/incremental.md"
