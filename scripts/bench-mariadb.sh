#!/usr/bin/env bash
# docs/bench/mariadb (not a test), issue 55: sheaf against mariadb-backup, the peer, on one MariaDB
# server loaded by sysbench (TABLES x ROWS, default 10 x 1,000,000: about 2.4 GB) and written to
# while both back it up, pairwise in one run (sheaf, peer, peer, sheaf; the median of each two):
#   backup   sheaf backup --to STRIPES stripes -c zstd:1
#            against mariadb-backup --backup --parallel=2 --stream=mbstream | zstd -1
#   restore  sheaf restore, its prepare (the server's crash recovery) included
#            against zstd -d | mbstream -x, then mariadb-backup --prepare
# The load: sysbench oltp_read_write on one thread at RATE transactions a second (default 50), the
# same for every run. Beside them, the physical limits: cat of the data directory from the page
# cache and cold (the read), and zstd -1 -b on the largest table's file (one core's compression).
#   [TABLES=10] [ROWS=1000000] [RATE=50] [STRIPES=2] [OUT=mariadb-bench.txt] scripts/bench-mariadb.sh
# Run as root (the server runs as Debian's mysql user; both tools read its files as root).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
TABLES=${TABLES:-10}
ROWS=${ROWS:-1000000}
RATE=${RATE:-50}
STRIPES=${STRIPES:-2}
OUT=$(realpath -m "${OUT:-mariadb-bench.txt}")
[ "$(id -u)" -eq 0 ] || { echo "bench-mariadb: run as root (the server runs as mysql)" >&2; exit 2; }
for p in mariadbd mariadb-install-db mariadb-backup mbstream sysbench zstd; do
  command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || { echo "bench-mariadb: $p is missing (scripts/install-deps.sh installs it)" >&2; exit 2; }
done
W=$(mktemp -d /var/tmp/sheaf-mariadb.XXXXXX)
chmod 755 "$W"
chown mysql "$W"
mkdir -p "$W/run" "$W/out"
chown mysql "$W/run"
as_mysql() { setpriv --reuid="$(id -u mysql)" --regid="$(id -g mysql)" --clear-groups "$@"; }
LOAD=""
cleanup() {
  [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null || true
  [ -f "$W/run/pid" ] && kill "$(cat "$W/run/pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
sock=$W/run/sock
url="mariadb://root@localhost/?socket=$sock"
sql() { mariadb --no-defaults -uroot --socket="$sock" -N -e "$1"; }

as_mysql mariadb-install-db --no-defaults --datadir="$W/data" --auth-root-authentication-method=normal --skip-test-db >/dev/null
as_mysql /usr/sbin/mariadbd --no-defaults --datadir="$W/data" --socket="$sock" --skip-networking \
  --log-error="$W/run/err" --pid-file="$W/run/pid" --innodb-buffer-pool-size=1G \
  --innodb-log-file-size=1G --innodb-io-capacity=10000 --log-bin=binlog --binlog-format=ROW --server-id=1 &
for _ in $(seq 300); do sql "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
sql "CREATE DATABASE sbtest"
sb() { sysbench oltp_read_write --db-driver=mysql --mysql-socket="$sock" --mysql-user=root --mysql-db=sbtest --tables="$TABLES" --table-size="$ROWS" "$@"; }
echo "bench-mariadb: sysbench prepare, $TABLES tables x $ROWS rows" >&2
t0=$(now)
sb --threads=2 prepare >/dev/null
echo "bench-mariadb: prepared in $(echo "$(now) - $t0" | bc -l) s; flushing" >&2
# Every page on disk before the first backup (else both tools would read pages still all zero).
sql "SET GLOBAL innodb_max_dirty_pages_pct = 0"
for _ in $(seq 1200); do
  [ "$(sql "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'")" -lt 100 ] && break
  sleep 0.5
done
sql "SET GLOBAL innodb_max_dirty_pages_pct = 90"
data_bytes=$(du -sb "$W/data" | cut -f1)

# The limits: what both copy of the data directory (not the redo log or the binary log) read
# cold, then from the page cache; one core's zstd -1.
copied() { find "$W/data" -type f ! -name 'ib_logfile*' ! -name 'binlog.*' -print0; }
sync; echo 3 >/proc/sys/vm/drop_caches
read_cold=$( { t0=$(now); copied | xargs -0 cat >/dev/null; echo "$(now) - $t0" | bc -l; } )
read_warm=$( { t0=$(now); copied | xargs -0 cat >/dev/null; echo "$(now) - $t0" | bc -l; } )
copied_bytes=$(copied | xargs -0 stat -c %s | awk '{s+=$1} END {print s}')
big=$(ls -S "$W"/data/sbtest/*.ibd | head -1)
zstd_b=$(zstd -b1 -i3 "$big" 2>&1 | tr '\r' '\n' | grep 'MB/s, ' | tail -1 | sed 's/^[^:]*: *//')

sb --threads=1 --rate="$RATE" --time=0 --report-interval=0 run >"$W/out/load.txt" 2>&1 &
LOAD=$!
sleep 2

sheaf_backup() {
  rm -rf "$W/s"; mkdir "$W/s"
  local to=() k
  for k in $(seq "$STRIPES"); do to+=(--to "$W/s/$k.sheaf"); done
  timed "sheaf_backup_$1" "$S" backup "$url" "${to[@]}" -c zstd:1 --json >"$W/out/sheaf_backup_$1.json"
}
peer_backup() {
  rm -rf "$W/p"; mkdir "$W/p"
  timed "peer_backup_$1" bash -c "mariadb-backup --backup --parallel=2 --stream=mbstream --target-dir='$W/p' --socket='$sock' --user=root 2>'$W/out/peer_backup_$1.log' | zstd -1 -q -c >'$W/p/backup.xb.zst'"
}
sheaf_restore() {
  rm -rf "$W/r"
  timed "sheaf_restore_$1" "$S" restore "$W/s/1.sheaf" --to "$W/r" --json >"$W/out/sheaf_restore_$1.json"
}
peer_restore() {
  rm -rf "$W/pr"; mkdir "$W/pr"
  timed "peer_restore_$1" bash -c "zstd -d -q -c '$W/p/backup.xb.zst' | mbstream -x -C '$W/pr' && mariadb-backup --prepare --target-dir='$W/pr' 2>'$W/out/peer_prepare_$1.log'"
}
# Pairwise: each backup's restore right after it, from the set it made.
sheaf_backup 1; sheaf_restore 1
peer_backup 1; peer_restore 1
peer_backup 2; peer_restore 2
sheaf_backup 2; sheaf_restore 2
sheaf_bytes=$(field "$W/out/sheaf_backup_2.json" "d['bytes_written']")
peer_bytes=$(stat -c %s "$W/p/backup.xb.zst")
# The median of two runs is their mean.
sb_b=$(printf '%s\n%s\n' "${T[sheaf_backup_1]}" "${T[sheaf_backup_2]}" | awk '{s+=$1} END {print s/NR}')
pb_b=$(printf '%s\n%s\n' "${T[peer_backup_1]}" "${T[peer_backup_2]}" | awk '{s+=$1} END {print s/NR}')
sr=$(printf '%s\n%s\n' "${T[sheaf_restore_1]}" "${T[sheaf_restore_2]}" | awk '{s+=$1} END {print s/NR}')
pr=$(printf '%s\n%s\n' "${T[peer_restore_1]}" "${T[peer_restore_2]}" | awk '{s+=$1} END {print s/NR}')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "bench-mariadb on $commit ($(date -u +%F)), $(nproc) cores; MariaDB $(sql "SELECT VERSION()"), sysbench $TABLES x $ROWS ($copied_bytes bytes copied of a $data_bytes-byte data directory), load oltp_read_write at $RATE tps on 1 thread"
  echo "limits: cat of what is copied $read_cold s cold, $read_warm s from the page cache; zstd -1 -b (one core) on $(basename "$big"): $zstd_b"
  printf '%-8s %-28s %10s %10s %10s\n' what tool "run 1 (s)" "run 2 (s)" "mean (s)"
  printf '%-8s %-28s %10.2f %10.2f %10.2f\n' backup "sheaf ($STRIPES stripes, zstd:1)" "${T[sheaf_backup_1]}" "${T[sheaf_backup_2]}" "$sb_b"
  printf '%-8s %-28s %10.2f %10.2f %10.2f\n' backup "mariadb-backup | zstd -1" "${T[peer_backup_1]}" "${T[peer_backup_2]}" "$pb_b"
  printf '%-8s %-28s %10.2f %10.2f %10.2f\n' restore "sheaf (prepare included)" "${T[sheaf_restore_1]}" "${T[sheaf_restore_2]}" "$sr"
  printf '%-8s %-28s %10.2f %10.2f %10.2f\n' restore "mbstream -x + --prepare" "${T[peer_restore_1]}" "${T[peer_restore_2]}" "$pr"
  echo "backup: sheaf $(echo "$pb_b / $sb_b" | bc -l | cut -c1-5)x the peer's speed (goal >= 2); restore: $(echo "$pr / $sr" | bc -l | cut -c1-5)x (goal >= 1.5)"
  echo "stored: sheaf $sheaf_bytes bytes, mariadb-backup | zstd -1 $peer_bytes bytes"
  echo "sheaf's last backup: $(field "$W/out/sheaf_backup_2.json" "'%.3f s in BLOCK_COMMIT, %d bytes of redo, %d pages verified' % (d['mariadb']['block_commit_seconds'], d['mariadb']['redo_bytes'], d['mariadb']['pages_verified'])")"
  echo "sheaf's last restore: $(field "$W/out/sheaf_restore_2.json" "'%.2f s writing, %.2f s recovery' % (d['seconds'], d['prepared']['recovery_seconds'])")"
} | tee "$OUT"
