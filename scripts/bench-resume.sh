#!/usr/bin/env bash
# docs/bench/resume (not a test), issue 54 part 2: a full backup into a folder repository killed
# (SIGKILL) once its stripe holds about half of what a whole one holds, then resumed by the next
# full backup, against a fresh full of the same cluster, pairwise in one run: fresh, killed +
# resumed, killed + resumed, fresh (the median of the two of each). The cluster: TPC-H scale SCALE
# (default 1, sheaf load-tpch), vacuumed and checkpointed, no load. CODEC default zstd:low.
# Reported: the resumed backup's time over the fresh full's, what it took and read, and dd's
# read speed of the data directory beside them (the physical limit of a fresh full's reads).
#   [SCALE=1] [CODEC=zstd:low] [OUT=resume-bench.txt] scripts/bench-resume.sh   (root: the server runs as postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
SCALE=${SCALE:-1}
CODEC=${CODEC:-zstd:low}
OUT=$(realpath -m "${OUT:-resume-bench.txt}")
PGBIN=$(pg_bin_dir)
bench_workdir resume "the server runs as postgres" sock data repo out
port=$(free_port)
start_primary "$W/data" "$port" "$S wal-push %p --repo $W/repo"
url="postgresql://postgres@/postgres?host=$W/sock&port=$port"
tpch="postgresql://postgres@/tpch?host=$W/sock&port=$port"
"${AS_PG[@]}" "$S" init --repo "$W/repo" "$url" >/dev/null
psql_at "$port" -c "CREATE DATABASE tpch" >/dev/null
echo "bench-resume: loading TPC-H scale $SCALE" >&2
"${AS_PG[@]}" "$S" load-tpch "$tpch" --scale "$SCALE" >/dev/null
psql_at "$port" -d tpch -c "VACUUM (FREEZE, ANALYZE)" -c "CHECKPOINT" >/dev/null
# Files last written more than a second before any attempt begins.
sleep 2

declare -A T
backup() { "${AS_PG[@]}" "$S" backup "$url" --repo "$W/repo" --compression "$CODEC" --json "$@"; }
fresh() { timed "fresh$1" backup --no-resume >"$W/out/fresh$1.json"; }
# Killed once the unfinished stripe holds `half` bytes; the kill hits sheaf itself, not runuser.
killed() {
  backup >/dev/null 2>&1 &
  local started=$!
  local p=""
  for _ in $(seq 6000); do
    p=$(ls "$W"/repo/backups/*/*_1.sheaf.partial 2>/dev/null | head -1 || true)
    if [ -n "$p" ] && [ "$(stat -c %s "$p")" -ge "$half" ]; then break; fi
    sleep 0.01
  done
  pkill -9 -f "sheaf backup $url --repo $W/repo" || true
  wait "$started" 2>/dev/null || true
  echo "killed$1: stripe at $(stat -c %s "$p") bytes" >&2
}
resumed() { timed "resumed$1" backup >"$W/out/resumed$1.json"; }

fresh 1
half=$(( $(field "$W/out/fresh1.json" "d['bytes_written']") / 2 ))
killed 1; resumed 1
killed 2; resumed 2
fresh 2

ratio() { echo "scale=3; $1 / $2" | bc -l; }
f=$(printf '%s\n' "${T[fresh1]}" "${T[fresh2]}" | median)
r=$(printf '%s\n' "${T[resumed1]}" "${T[resumed2]}" | median)
raw=$(field "$W/out/fresh1.json" "d['bytes_read']")
sync; echo 3 >/proc/sys/vm/drop_caches
dd_s=$( { /usr/bin/time -f %e sh -c "find '$W/data/base' -type f -exec cat {} + >/dev/null" ; } 2>&1 | tail -1)
{
  echo "# sheaf backup resumed after a kill at half, against a fresh full (TPC-H scale $SCALE, $CODEC, folder repository)"
  echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD), $(nproc) cores"
  printf 'fresh full      %8.2f s  (runs: %s)\n' "$f" "${T[fresh1]} ${T[fresh2]}"
  printf 'resumed         %8.2f s  (runs: %s)\n' "$r" "${T[resumed1]} ${T[resumed2]}"
  printf 'ratio           %8s   (goal <= 0.6)\n' "$(ratio "$r" "$f")"
  for i in 1 2; do
    echo "resumed$i: $(field "$W/out/resumed$i.json" "'read %d bytes, took %d files (%d bytes) from the attempt before, kept %d stored bytes' % (d['bytes_read'], d['resumed']['files'], d['resumed']['bytes'], d['resumed']['kept_stored_bytes'])")"
  done
  echo "fresh: read $raw bytes, wrote $(field "$W/out/fresh1.json" "d['bytes_written']") bytes"
  echo "physical limit: cat of base/ from a cold cache $dd_s s"
} | tee "$OUT"
