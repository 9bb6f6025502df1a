#!/usr/bin/env bash
# A repository on a backup host, served by its agent (issue 53's goals), against the same
# repository in a local folder, in one session on one TPC-H cluster. The agent listens on
# 127.0.0.1 with mutual TLS; both it and the database host's sheaf share this host's cores (say
# so when quoting).
#   - wal-push: SEGMENTS real 16 MiB segments pushed one call at a time, as the archiver calls it
#     (no look-ahead), into the local folder and through the agent, alternately, ROUNDS rounds;
#     segments per second each;
#   - backup (zstd:low, the default) into each, cache dropped before each (COLD=1, root), ROUNDS
#     rounds alternately; and a restore from each.
#
#   SCALE=1 OUT=served-report scripts/bench-served.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
SCALE=${SCALE:-1}
SEGMENTS=${SEGMENTS:-48}
ROUNDS=${ROUNDS:-2}
OUT=$(realpath -m "${OUT:-served-report}")
S=$(realpath "${SHEAF:-target/release/sheaf}")
PGBIN=$(pg_bin_dir)
COLD=${COLD:-1}
mkdir -p "$OUT"
bench_workdir bench-served "cache drops" sock stage local served certs

# The cluster, its WAL copied to a staging folder by the archiver.
PORT=$(free_port)
mkdir -m 700 "$W/data" && chown postgres "$W/data"
start_primary "$W/data" "$PORT" "cp %p $W/stage/%f"
URL="postgresql://postgres@/postgres?host=$W/sock&port=$PORT"
"$S" load-tpch "$URL" --scale "$SCALE" >/dev/null 2>&1
SRC=$(du -sb --exclude=pg_wal "$W/data" | cut -f1)
# Fresh segments for the pushes: rows written and switched until SEGMENTS more are archived.
psql_at "$PORT" -c "CREATE TABLE IF NOT EXISTS walgen (id int, pad text)"
before=$(ls "$W/stage" | grep -c '^[0-9A-F]\{24\}$' || true)
while [ "$(ls "$W/stage" | grep -c '^[0-9A-F]\{24\}$')" -lt $((before + SEGMENTS)) ]; do
  psql_at "$PORT" -c "INSERT INTO walgen SELECT g, md5(g::text) || md5(random()::text) FROM generate_series(1, 100000) g"
done
mapfile -t SEGS < <(ls "$W/stage" | grep '^[0-9A-F]\{24\}$' | tail -n "$SEGMENTS")

# The backup host's agent, and this host's certificate, granted repository bench.
as_pg "$S" agent --init-certs "$W/certs/tls" >/dev/null
as_pg "$S" agent --init-certs "$W/certs/tls" --add-client dbhost --grant bench >/dev/null
APORT=$(free_port)
as_pg "$S" agent --listen "127.0.0.1:$APORT" --serve-repo "bench=$W/served" --tls-dir "$W/certs/tls" 2>"$W/agent.log" &
PIDS+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$APORT") 2>/dev/null && break; sleep 0.1; done
SERVED="sheaf://127.0.0.1:$APORT/bench"
TLS=(--tls-dir "$W/certs/tls/clients/dbhost")
as_pg "$S" init --repo "$W/local" "$URL" >/dev/null
as_pg "$S" init --repo "$SERVED" "${TLS[@]}" "$URL" >/dev/null

push_all() {
  local repo=$1; shift
  for seg in "${SEGS[@]}"; do as_pg "$S" wal-push "$W/stage/$seg" --repo "$repo" --parallel 1 "$@" >/dev/null; done
}
clear_wal() { rm -rf "$W/local/wal" "$W/served/wal"; }
for r in $(seq "$ROUNDS"); do
  clear_wal
  T[push_local_$r]=0; t0=$(now); push_all "$W/local"; T[push_local_$r]=$(echo "$(now) - $t0" | bc -l)
  t0=$(now); push_all "$SERVED" "${TLS[@]}"; T[push_served_$r]=$(echo "$(now) - $t0" | bc -l)
  echo "round $r: wal-push local ${T[push_local_$r]} s, served ${T[push_served_$r]} s" >&2
done
for r in $(seq "$ROUNDS"); do
  b_local() { as_pg "$S" backup "$URL" --repo "$W/local" >/dev/null; }
  timed "backup_local_$r" b_local
  b_served() { as_pg "$S" backup "$URL" --repo "$SERVED" "${TLS[@]}" >/dev/null; }
  timed "backup_served_$r" b_served
done
restore_from() { rm -rf "$W/r"; mkdir "$W/r"; chown postgres "$W/r"; as_pg "$S" restore --repo "$1" --to "$W/r/data" "${@:2}" >/dev/null; }
r_local() { restore_from "$W/local"; }
timed restore_local r_local
r_served() { restore_from "$SERVED" "${TLS[@]}"; }
timed restore_served r_served
WALMB=$(echo "$(du -sb --apparent-size "${SEGS[@]/#/$W/stage/}" | awk '{s+=$1} END {print s}') / 1000000" | bc -l)

{
  echo "# A repository on a backup host's agent against a local folder: TPC-H scale $SCALE, $(date -u +%F), $("$PGBIN/postgres" --version)"
  echo
  echo "> Measured on commit $(git rev-parse --short HEAD) ($(date -u +%F)): \`scripts/bench-served.sh\` (SEGMENTS=$SEGMENTS, ROUNDS=$ROUNDS), the agent on 127.0.0.1 over mutual TLS; the agent and the database host's sheaf share this host's $(nproc) cores. Backups and restores with the page cache dropped before each (COLD=$COLD)."
  echo
  echo "| round | wal-push local (segments/s) | wal-push through the agent (segments/s) | ratio | backup local (s) | backup through the agent (s) | ratio |"
  echo "|---|---|---|---|---|---|---|"
  for r in $(seq "$ROUNDS"); do
    pl=$(echo "$SEGMENTS / ${T[push_local_$r]}" | bc -l); ps=$(echo "$SEGMENTS / ${T[push_served_$r]}" | bc -l)
    printf '| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |\n' "$r" "$pl" "$ps" "$(echo "$ps / $pl" | bc -l)" "${T[backup_local_$r]}" "${T[backup_served_$r]}" "$(echo "${T[backup_local_$r]} / ${T[backup_served_$r]}" | bc -l)"
  done
  echo
  printf 'Source %.0f MB; %s segments, %.0f MB of WAL. Restore: local %.2f s, through the agent %.2f s (%.2fx).\n' "$(echo "$SRC / 1000000" | bc -l)" "$SEGMENTS" "$WALMB" "${T[restore_local]}" "${T[restore_served]}" "$(echo "${T[restore_local]} / ${T[restore_served]}" | bc -l)"
} >"$OUT/README.md"
cp "$W/agent.log" "$OUT/agent.log" 2>/dev/null || true
cat "$OUT/README.md"
