#!/usr/bin/env bash
# Issue 37's goals on TPC-H, in one run on one cluster:
# - verify with its ledger: a chain of a full and six incrementals (~1 % of pages each) verified,
#   one more incremental, then `verify --repo` (the ledger's) against `verify --repo --full` of the
#   same state, alternating, REPEAT times each;
# - a drill (`sheaf drill`, pg_amcheck --heapallindexed) against the same steps by hand (`sheaf
#   restore`, `pg_ctl start -w`, waiting for recovery to end, `pg_amcheck --all --heapallindexed
#   --install-missing`, `pg_ctl stop`), alternating, REPEAT times each.
# The page cache is dropped (and everything synced) before each timed command.
#
#   SHEAF=target/release/sheaf SCALE=1 REPEAT=2 OUT=proof-report scripts/bench-proof.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}
REPEAT=${REPEAT:-2}
OUT=${OUT:-proof-report}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
W=$(mktemp -d /var/tmp/sheaf-proof.XXXXXX)
chmod 755 "$W"
mkdir -p "$OUT"
. scripts/lib.sh
mkdir -p "$W/data" "$W/sock" "$W/repo" "$W/hand-sock"
[ "$(id -u)" -eq 0 ] && chown postgres "$W" "$W/data" "$W/sock" "$W/repo" "$W/hand-sock"
PORT=$((20000 + RANDOM % 20000))
HAND_PORT=$((PORT + 1))
URL="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
TPCH="postgres://postgres@localhost:$PORT/tpch?host=$W/sock"
cleanup() {
  as_pg "$PGBIN/pg_ctl" -D "$W/data" -m immediate stop >/dev/null 2>&1 || true
  as_pg "$PGBIN/pg_ctl" -D "$W/hand" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
start_primary "$W/data" "$PORT" "$S wal-push %p --repo $W/repo"
psql() { as_pg "$PGBIN/psql" -h "$W/sock" -p "$PORT" -U postgres -Atq "$@"; }
as_pg "$S" init --repo "$W/repo" "$URL" >/dev/null
psql -c "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"$S" load-tpch "$TPCH" --scale "$SCALE" >/dev/null
# Keys and an index, as a real schema has them: what pg_amcheck --heapallindexed checks against
# the heap (TPC-H's load makes none).
psql -d tpch -c "ALTER TABLE orders ADD PRIMARY KEY (o_orderkey)" \
  -c "ALTER TABLE lineitem ADD PRIMARY KEY (l_orderkey, l_linenumber)" -c "CREATE INDEX ON lineitem (l_shipdate)"
psql -d tpch -c "VACUUM ANALYZE" -c "CHECKPOINT"

now() { date +%s.%N; }
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# `timed NAME CMD...`: run after sync and a dropped cache, add NAME's seconds to T[NAME] (a list).
declare -A T
timed() { local n=$1; shift; cold; local t0; t0=$(now); "$@"; local s; s=$(echo "$(now) - $t0" | bc -l); T[$n]="${T[$n]:-} $s"; echo "$n: $s s" >&2; }
backup() { as_pg "$S" backup "$URL" --repo "$W/repo" --json "$@" >/dev/null; }
archive_now() {
  local seg; seg=$(psql -c "SELECT pg_logical_emit_message(false, 'bench', 'x')" -c "SELECT pg_walfile_name(pg_switch_wal())" | tail -1)
  for _ in $(seq 600); do
    local last; last=$(psql -c "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
    [[ "$last" > "$seg" || "$last" == "$seg" ]] && return; sleep 0.2
  done
  echo "archiving stalled" >&2; exit 1
}
# About $1 % of lineitem's and orders' pages changed (as scripts/bench-incremental.sh).
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
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# The chain, verified once (the ledger's first run reads it all).
archive_now
backup --type full
for i in 1 2 3 4 5 6; do change 1 $((i * 13)); backup --type incr; done
archive_now
timed verify_first as_pg "$S" verify --repo "$W/repo" --json >"$W/verify_first.json"
# One more incremental; then the ledger's verify and a full one of the same state, alternating
# (each ledger run is timed on a copy of the ledger as the incremental left it).
change 1 91
backup --type incr
archive_now
cp "$W/repo/verify.ledger" "$W/ledger.before"
for r in $(seq "$REPEAT"); do
  cp "$W/ledger.before" "$W/repo/verify.ledger"; chown --reference="$W/repo" "$W/repo/verify.ledger"
  timed verify_new as_pg "$S" verify --repo "$W/repo" --json >"$W/verify_new.json"
  timed verify_full as_pg "$S" verify --repo "$W/repo" --full --json >"$W/verify_full.json"
done

# The drill and the same steps by hand, alternating.
by_hand() {
  rm -rf "$W/hand"
  as_pg "$S" restore --repo "$W/repo" --to "$W/hand" --archive-mode off >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$W/hand" -l "$W/hand-sock/log" -w -t 3600 \
    -o "-p $HAND_PORT -k $W/hand-sock -c listen_addresses=''" start >/dev/null
  until [ "$(as_pg "$PGBIN/psql" -h "$W/hand-sock" -p "$HAND_PORT" -U postgres -Atqc "SELECT pg_is_in_recovery()")" = f ]; do sleep 0.1; done
  as_pg "$PGBIN/pg_amcheck" -h "$W/hand-sock" -p "$HAND_PORT" -U postgres --all --heapallindexed --install-missing >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$W/hand" -w stop >/dev/null
  rm -rf "$W/hand"
}
drill() { as_pg "$S" drill --repo "$W/repo" --to "$W/drill" --pg-bin "$PGBIN" --json >"$W/drill.json"; }
for r in $(seq "$REPEAT"); do
  timed by_hand by_hand
  timed drill drill
done

mean() { echo "$1" | tr ' ' '\n' | grep -v '^$' | awk '{ s += $1; n++ } END { printf "%.2f", s / n }'; }
all() { echo "${T[$1]}" | xargs printf "%.2f " | sed 's/ $//'; }
ratio() { echo "scale=3; $1 / $2" | bc -l; }
{
  echo "# Issue 37's goals, TPC-H scale $SCALE (with orders' and lineitem's primary keys and an index on l_shipdate), $(date -u +%F), $(nproc) cores, $("$PGBIN/postgres" --version), cache dropped before each"
  echo
  echo "| verify --repo (chain: full + 7 incr) | seconds (each run) | mean | × --full | bytes read | backups read | WAL files read |"
  echo "|---|---|---|---|---|---|---|"
  for n in verify_first verify_full verify_new; do
    echo "| $n | $(all $n) | $(mean "${T[$n]}") | $(ratio "$(mean "${T[$n]}")" "$(mean "${T[verify_full]}")") | $(field "$W/$n.json" "d['bytes_read']") | $(field "$W/$n.json" "sum(1 for b in d['backups'] if b['read'])") of $(field "$W/$n.json" "len(d['backups'])") | $(field "$W/$n.json" "d['wal_files_read']") of $(field "$W/$n.json" "d['wal_files']") |"
  done
  echo
  echo "| proof of the newest backup | seconds (each run) | mean | × by hand |"
  echo "|---|---|---|---|"
  echo "| by hand: restore, pg_ctl start -w, recovery's end, pg_amcheck --heapallindexed, stop | $(all by_hand) | $(mean "${T[by_hand]}") | 1 |"
  echo "| sheaf drill | $(all drill) | $(mean "${T[drill]}") | $(ratio "$(mean "${T[drill]}")" "$(mean "${T[by_hand]}")") |"
  echo
  echo "The last drill's phases (s): $(field "$W/drill.json" "d['phases']")"
} | tee "$OUT/proof.md"
