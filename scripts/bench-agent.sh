#!/usr/bin/env bash
# Pulling a backup from a database host over a shaped link (issue 23's second goal), one run each,
# on one TPC-H cluster. The database host is a network namespace on this machine (its PostgreSQL
# and `sheaf agent` run there), joined by a veth pair shaped to RATE (htb) with DELAY_MS added each
# way by scripts/delay-relay.py (this kernel has no netem). The backup host is this namespace.
# Measured, each after dropping the page cache (COLD=1, the default), each into a fresh folder:
#   - the line: 512 MiB of zeros sent across the same relay and link;
#   - sheaf backup --agent, compressing here (zstd:low);
#   - sheaf backup --agent --compress-on agent, the agent compressing on the database host's cores;
#   - sheaf backup --via base-backup, the same stream pg_basebackup reads, compressed here;
#   - pg_basebackup over the replication protocol (plain format, -X fetch, no compression);
#   - pgBackRest through its TLS server (pgbackrest server on the database host, the repository
#     here; zstd level 1, 2 processes, as sheaf's zstd:low on 2 threads; certificates by openssl),
#     where pgbackrest is installed (or PGBACKREST names it) and serves this major (2.45: up to 15).
# Root only. Run from the repository; sheaf built with make build.
#
#   RATE=1gbit DELAY_MS=1 SCALE=1 OUT=agent-report scripts/bench-agent.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(realpath "${SHEAF:-target/release/sheaf}")
SCALE=${SCALE:-1}; RATE=${RATE:-1gbit}; DELAY_MS=${DELAY_MS:-1}
OUT=$(realpath -m "${OUT:-agent-report}")
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
NS=sheaf-bench-db; N=77; DB=10.77.$N.2
W=$(mktemp -d /var/tmp/sheaf-agent.XXXXXX); chmod 755 "$W"
mkdir -p "$OUT" "$W/data" "$W/sock" "$W/out"
chown postgres "$W/data" "$W/sock"; chmod 700 "$W/data"
as_pg() { runuser -u postgres -- "$@"; }
in_ns() { ip netns exec "$NS" "$@"; }
PORT=5432
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "delay-relay.py $DB" 2>/dev/null || true
  pkill -f "agent --listen 127.0.0.1:7400" 2>/dev/null || true
  in_ns runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/data" -m immediate stop >/dev/null 2>&1 || true
  scripts/remote-link.sh down "$NS" $N
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
scripts/remote-link.sh down "$NS" $N
scripts/remote-link.sh up "$NS" $N "$RATE"
as_pg "$PGBIN/initdb" -D "$W/data" --data-checksums -A trust -U postgres >/dev/null
cat >>"$W/data/postgresql.conf" <<EOF
port = $PORT
unix_socket_directories = '$W/sock'
listen_addresses = '127.0.0.1'
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
EOF
echo "host all all 127.0.0.1/32 trust" >>"$W/data/pg_hba.conf"
echo "host replication all 127.0.0.1/32 trust" >>"$W/data/pg_hba.conf"
in_ns runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/data" -l "$W/sock/log" -w start >/dev/null
LOCAL="postgres://postgres@/postgres?host=$W/sock&port=$PORT"
as_pg "$PGBIN/psql" -h "$W/sock" -p $PORT -U postgres -qc "CREATE DATABASE tpch"
echo "loading TPC-H scale $SCALE" >&2
"$S" load-tpch "postgres://postgres@/tpch?host=$W/sock&port=$PORT" --scale "$SCALE" >/dev/null
as_pg "$PGBIN/psql" -h "$W/sock" -p $PORT -U postgres -d tpch -qc "VACUUM ANALYZE" -c "CHECKPOINT"

# The database host's services, each behind the delay line, reached at 10.77.N.2.
"$S" agent --init-certs "$W/tls" --name "$DB" >/dev/null
in_ns "$S" agent --listen 127.0.0.1:7400 --pgdata "$W/data" --tls-dir "$W/tls" 2>"$W/agent.log" &
PIDS+=($!)
in_ns python3 scripts/delay-relay.py "$DB:7401" 127.0.0.1:7400 "$DELAY_MS" &
PIDS+=($!)
in_ns python3 scripts/delay-relay.py "$DB:5433" "127.0.0.1:$PORT" "$DELAY_MS" &
PIDS+=($!)
in_ns python3 -c '
import socket
s = socket.create_server(("127.0.0.1", 9000))
while True:
    c, _ = s.accept()
    z = bytes(1 << 20)
    for _ in range(512):
        c.sendall(z)
    c.close()' &
PIDS+=($!)
in_ns python3 scripts/delay-relay.py "$DB:9001" 127.0.0.1:9000 "$DELAY_MS" &
PIDS+=($!)
sleep 1
REMOTE="postgres://postgres@$DB:5433/postgres"

now() { date +%s.%N; }
cold() { sync; if [ "${COLD:-1}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
declare -A T B
timed() { local n=$1; shift; cold; local t0; t0=$(now); "$@"; T[$n]=$(echo "$(now) - $t0" | bc -l); echo "$n: ${T[$n]} s" >&2; }
line() { python3 -c '
import socket, sys
c = socket.create_connection((sys.argv[1], 9001)); n = 0
while True:
    d = c.recv(1 << 20)
    if not d: break
    n += len(d)
print(n)' "$DB" >"$W/line.bytes"; }
timed line line
B[line]=$(cat "$W/line.bytes")
sheaf_here() { rm -rf "$W/out/s"; mkdir -p "$W/out/s"; "$S" backup "$REMOTE" --agent "$DB:7401" --tls-dir "$W/tls" --to "$W/out/s/a.sheaf" --json >"$OUT/sheaf-agent.json"; }
timed sheaf_agent sheaf_here
B[sheaf_agent]=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$OUT/sheaf-agent.json")
sheaf_there() { rm -rf "$W/out/c"; mkdir -p "$W/out/c"; "$S" backup "$REMOTE" --agent "$DB:7401" --tls-dir "$W/tls" --compress-on agent --to "$W/out/c/a.sheaf" --json >"$OUT/sheaf-agent-compressing.json"; }
timed sheaf_agent_compressing sheaf_there
B[sheaf_agent_compressing]=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$OUT/sheaf-agent-compressing.json")
sheaf_bb() { rm -rf "$W/out/bb"; mkdir -p "$W/out/bb"; "$S" backup "$REMOTE" --via base-backup --to "$W/out/bb/a.sheaf" --json >"$OUT/sheaf-base-backup.json"; }
timed sheaf_base_backup sheaf_bb
B[sheaf_base_backup]=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$OUT/sheaf-base-backup.json")
basebackup() { rm -rf "$W/out/pgb"; "$PGBIN/pg_basebackup" -d "$REMOTE" -D "$W/out/pgb" -X fetch -c fast -Fp; }
timed pg_basebackup basebackup
B[pg_basebackup]=$(du -sb --exclude=pg_wal "$W/out/pgb" | cut -f1)
ROWS="line sheaf_agent sheaf_agent_compressing sheaf_base_backup pg_basebackup"

# PGBACKREST names the binary (scripts/build-pgbackrest.sh builds 2.60, which serves up to 18);
# Debian's 2.45 serves up to 15.
PGBR=${PGBACKREST:-$(command -v pgbackrest || true)}
pg_major=$($PGBIN/postgres --version | grep -o '[0-9]*' | head -1)
pgbr_minor=$([ -n "$PGBR" ] && "$PGBR" version | grep -o '2\.[0-9]*' | cut -d. -f2)
if [ -n "$PGBR" ] && { [ "$pg_major" -le 15 ] || [ "${pgbr_minor:-0}" -ge 50 ]; }; then
  # Certificates for pgBackRest's TLS server (it names clients by CN), and its two configurations.
  C=$W/pgbr-tls; mkdir -p "$C"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" -keyout "$C/ca.key" -out "$C/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$DB" -addext "subjectAltName=DNS:$DB" -keyout "$C/server.key" -out "$C/server.csr" 2>/dev/null
  openssl x509 -req -in "$C/server.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 -copy_extensions copy -out "$C/server.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=bench-client" -keyout "$C/client.key" -out "$C/client.csr" 2>/dev/null
  openssl x509 -req -in "$C/client.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 -out "$C/client.pem" 2>/dev/null
  chown -R postgres "$C"; chmod 600 "$C"/*.key
  mkdir -p "$W/pgbr-repo" "$W/pgbr-log"; chown postgres "$W/pgbr-repo" "$W/pgbr-log"
  printf '%s\n' "[global]" "log-path=$W/pgbr-log" "tls-server-address=127.0.0.1" "tls-server-port=8432" \
    "tls-server-cert-file=$C/server.pem" "tls-server-key-file=$C/server.key" "tls-server-ca-file=$C/ca.pem" \
    "tls-server-auth=bench-client=bench" "[bench]" "pg1-path=$W/data" "pg1-socket-path=$W/sock" "pg1-port=$PORT" >"$W/pgbr-db.conf"
  printf '%s\n' "[global]" "log-path=$W/pgbr-log" "repo1-path=$W/pgbr-repo" "compress-type=zst" "compress-level=1" \
    "process-max=2" "start-fast=y" "archive-check=n" "[bench]" "pg1-host=$DB" "pg1-host-port=8433" "pg1-host-type=tls" \
    "pg1-host-cert-file=$C/client.pem" "pg1-host-key-file=$C/client.key" "pg1-host-ca-file=$C/ca.pem" "pg1-path=$W/data" "pg1-socket-path=$W/sock" "pg1-port=$PORT" >"$W/pgbr-repo.conf"
  chown postgres "$W/pgbr-db.conf" "$W/pgbr-repo.conf"
  in_ns runuser -u postgres -- "$PGBR" --config="$W/pgbr-db.conf" server >/dev/null 2>&1 &
  PIDS+=($!)
  in_ns python3 scripts/delay-relay.py "$DB:8433" 127.0.0.1:8432 "$DELAY_MS" &
  PIDS+=($!)
  sleep 1
  runuser -u postgres -- "$PGBR" --config="$W/pgbr-repo.conf" --stanza=bench stanza-create >/dev/null
  pgbr() { runuser -u postgres -- "$PGBR" --config="$W/pgbr-repo.conf" --stanza=bench --type=full backup; }
  timed pgbackrest_tls pgbr
  B[pgbackrest_tls]=${B[sheaf_agent]}
  ROWS="$ROWS pgbackrest_tls"
fi

{
  echo "# Pulling a backup over a $RATE link with ${DELAY_MS} ms each way: TPC-H scale $SCALE, $(date -u +%F), $($PGBIN/postgres --version)"
  echo
  echo "The database host is a network namespace joined by a veth pair shaped by htb; the delay comes from scripts/delay-relay.py. Cache dropped before each (COLD=${COLD:-1}); one run each."
  echo
  echo "| what | seconds | source MiB | source MiB/s | × the line |"
  echo "|---|---|---|---|---|"
  for n in $ROWS; do
    mibs=$(echo "${B[$n]} / 1048576 / ${T[$n]}" | bc -l)
    line_mibs=$(echo "${B[line]} / 1048576 / ${T[line]}" | bc -l)
    printf '| %s | %.2f | %.0f | %.1f | %.2f |\n' "$n" "${T[$n]}" "$(echo "${B[$n]} / 1048576" | bc -l)" "$mibs" "$(echo "$mibs / $line_mibs" | bc -l)"
  done
  echo
  ratio() { echo "${T[$1]} / ${T[$2]}" | bc -l | cut -c1-4; }
  if [ -n "${T[pgbackrest_tls]:-}" ]; then echo "sheaf through the agent against pgBackRest's TLS server: $(ratio pgbackrest_tls sheaf_agent)x compressing here, $(ratio pgbackrest_tls sheaf_agent_compressing)x compressing on the agent (pgBackRest compresses on the database host)"; fi
  echo "sheaf --compress-on agent against pg_basebackup: $(ratio pg_basebackup sheaf_agent_compressing)x; it sent $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"{r['bytes_written']/r['bytes_read']:.2f}\")" "$OUT/sheaf-agent-compressing.json") of the source's bytes"
  echo "sheaf through the agent against pg_basebackup: $(echo "${T[pg_basebackup]} / ${T[sheaf_agent]}" | bc -l | cut -c1-4)x; sheaf --via base-backup against pg_basebackup: $(echo "${T[pg_basebackup]} / ${T[sheaf_base_backup]}" | bc -l | cut -c1-4)x"
} | tee "$OUT/agent.md"
