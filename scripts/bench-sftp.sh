#!/usr/bin/env bash
# A repository on a backup host that offers only sshd (issue 53's SFTP goal), one session, one TPC-H
# cluster, OpenSSH's sshd on 127.0.0.1 (its own host key, a client key; both sides share this
# host's cores: say so when quoting). Each timed after dropping the page cache (COLD=1, root):
#   - the ceiling: `sftp put` of sheaf's own backup file (the same bytes) into the same folder;
#   - sheaf backup to local disk, and --to sftp://... with one stripe and two (none, lz4 and
#     zstd:low; fsync@openssh.com on);
#   - the same into a repository (--repo sftp://...), and its restore back to local disk;
#   - pgBackRest with repo1-type=sftp (zstd level 1 and lz4, process-max 2), where the binary
#     in PGBACKREST supports it (2.60 built by scripts/build-pgbackrest.sh does; Debian's 2.45
#     does not), and its restore.
#
#   PGBACKREST=$(scripts/build-pgbackrest.sh) SCALE=1 OUT=sftp-report scripts/bench-sftp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
SCALE=${SCALE:-1}
OUT=$(realpath -m "${OUT:-sftp-report}")
S=$(realpath "${SHEAF:-target/release/sheaf}")
PGBR=${PGBACKREST:-$(command -v pgbackrest || true)}
PGBIN=$(pg_bin_dir)
COLD=${COLD:-1}
mkdir -p "$OUT"
bench_workdir bench-sftp "sshd, cache drops" sock out repo pgbr-repo pgbr-log
declare -A T B

# sshd with its own keys; logins by key only; OpenSSH's sftp (fsync@openssh.com).
ssh-keygen -q -t ed25519 -N '' -f "$W/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$W/client_key"
cp "$W/client_key.pub" "$W/authorized_keys"
chmod 644 "$W/client_key"
SSHPORT=$(free_port)
echo "[127.0.0.1]:$SSHPORT $(cut -d' ' -f1-2 "$W/host_key.pub")" >"$W/known_hosts"
mkdir -p /run/sshd
printf '%s\n' "Port $SSHPORT" "ListenAddress 127.0.0.1" "HostKey $W/host_key" "PidFile $W/sshd.pid" \
  "AuthorizedKeysFile $W/authorized_keys" "StrictModes no" "PasswordAuthentication no" "UsePAM yes" \
  "PermitRootLogin prohibit-password" "Subsystem sftp internal-sftp" "LogLevel ERROR" >"$W/sshd_config"
/usr/sbin/sshd -D -e -f "$W/sshd_config" 2>"$W/sshd.log" &
PIDS+=($!)
sleep 1

# The cluster.
PORT=$(free_port)
mkdir -m 700 "$W/data" && chown postgres "$W/data"
as_pg "$PGBIN/initdb" -D "$W/data" --data-checksums -A trust -U postgres >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$W/data" -l "$W/sock/pg.log" -w -o "-p $PORT -k $W/sock -c listen_addresses=''" start >/dev/null
URL="postgresql://postgres@/postgres?host=$W/sock&port=$PORT"
"$S" load-tpch "$URL" --scale "$SCALE" >/dev/null 2>&1
as_pg "$PGBIN/psql" -h "$W/sock" -p "$PORT" -U postgres -qc "ALTER SYSTEM SET archive_mode = on" -c "ALTER SYSTEM SET archive_command = '/bin/true'" >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$W/data" -l "$W/sock/pg.log" -w -o "-p $PORT -k $W/sock -c listen_addresses=''" restart >/dev/null
SRC=$(du -sb --exclude=pg_wal "$W/data" | cut -f1)

SFTP="sftp://postgres@127.0.0.1:$SSHPORT"
KEYS=(--sftp-known-hosts "$W/known_hosts" --sftp-key-file "$W/client_key")
for c in none lz4 zstd:low; do
  cn=${c//:/-}
  # The same bytes to local disk first, for the ceiling's file.
  as_pg "$S" backup "$URL" -c "$c" --to "$W/out/local-$cn.sheaf" >/dev/null
  B[put_$cn]=$(stat -c %s "$W/out/local-$cn.sheaf")
  local_backup() { as_pg "$S" backup "$URL" -c "$c" --to "$W/out/disk-$cn.sheaf" >/dev/null; }
  timed "sheaf_disk_$cn" local_backup
  put() { as_pg sftp -q -b - -i "$W/client_key" -o UserKnownHostsFile="$W/known_hosts" -P "$SSHPORT" postgres@127.0.0.1 >/dev/null <<<"put $W/out/local-$cn.sheaf $W/out/put-$cn.sheaf"; }
  timed "sftp_put_$cn" put
  to() { as_pg "$S" backup "$URL" -c "$c" --to "$SFTP$W/out/sheaf-$cn.sheaf" "${KEYS[@]}" --json >"$OUT/sheaf-$cn.json"; }
  timed "sheaf_to_$cn" to
  to2() { as_pg "$S" backup "$URL" -c "$c" --to "$SFTP$W/out/sheaf2-${cn}_1.sheaf" --to "$SFTP$W/out/sheaf2-${cn}_2.sheaf" "${KEYS[@]}" >/dev/null; }
  timed "sheaf_to_2_stripes_$cn" to2
  rm -f "$W"/out/*-"$cn"*.sheaf
done
as_pg "$S" init --repo "$SFTP$W/repo" "$URL" "${KEYS[@]}" >/dev/null
repo_backup() { as_pg "$S" backup "$URL" -c zstd:low --repo "$SFTP$W/repo" "${KEYS[@]}" >/dev/null; }
timed sheaf_repo_zstd-low repo_backup
repo_restore() { rm -rf "$W/r"; mkdir "$W/r"; chown postgres "$W/r"; as_pg "$S" restore --repo "$SFTP$W/repo" --to "$W/r/data" "${KEYS[@]}" >/dev/null; }
timed sheaf_restore_zstd-low repo_restore
ROWS=""
for cn in none lz4 zstd-low; do ROWS="$ROWS sftp_put_$cn sheaf_disk_$cn sheaf_to_$cn sheaf_to_2_stripes_$cn"; done
ROWS="$ROWS sheaf_repo_zstd-low sheaf_restore_zstd-low"

if [ -n "$PGBR" ] && "$PGBR" help backup repo-type 2>/dev/null | grep -q '^\* sftp'; then
  for c in zst lz4; do
    rm -rf "$W/pgbr-repo"/*
    printf '%s\n' "[global]" "log-path=$W/pgbr-log" "repo1-type=sftp" "repo1-path=$W/pgbr-repo" \
      "repo1-sftp-host=127.0.0.1" "repo1-sftp-host-port=$SSHPORT" "repo1-sftp-host-user=postgres" \
      "repo1-sftp-private-key-file=$W/client_key" "repo1-sftp-public-key-file=$W/client_key.pub" \
      "repo1-sftp-host-key-check-type=strict" "repo1-sftp-known-host=$W/known_hosts" "repo1-sftp-host-key-hash-type=sha256" \
      "compress-type=$c" "compress-level=1" "process-max=2" "start-fast=y" "archive-check=n" \
      "[bench]" "pg1-path=$W/data" "pg1-socket-path=$W/sock" "pg1-port=$PORT" >"$W/pgbr.conf"
    chown postgres "$W/pgbr.conf"
    as_pg "$PGBR" --config="$W/pgbr.conf" --stanza=bench stanza-create
    pgbr_backup() { as_pg "$PGBR" --config="$W/pgbr.conf" --stanza=bench --type=full backup; }
    timed "pgbackrest_$c" pgbr_backup
    pgbr_restore() { rm -rf "$W/r"; mkdir -p -m 700 "$W/r/data"; chown -R postgres "$W/r"; as_pg "$PGBR" --config="$W/pgbr.conf" --stanza=bench --pg1-path="$W/r/data" restore; }
    timed "pgbackrest_restore_$c" pgbr_restore
    ROWS="$ROWS pgbackrest_$c pgbackrest_restore_$c"
  done
fi

{
  echo "# A repository over SFTP: TPC-H scale $SCALE, $(date -u +%F), $("$PGBIN/postgres" --version)"
  echo
  echo "> Measured on commit $(git rev-parse --short HEAD) ($(date -u +%F)): \`scripts/bench-sftp.sh\`, one run each, cache dropped before each (COLD=$COLD); sshd and sheaf share this host's $(nproc) cores."
  echo
  echo "| what | seconds | source MB/s |"
  echo "|---|---|---|"
  for n in $ROWS; do printf '| %s | %.2f | %.0f |\n' "$n" "${T[$n]}" "$(echo "$SRC / 1000000 / ${T[$n]}" | bc -l)"; done
  echo
  for cn in none lz4 zstd-low; do
    echo "sheaf --to sftp:// ($cn) against sftp put of its own $(echo "${B[put_$cn]} / 1000000" | bc) MB file: $(echo "${T[sftp_put_$cn]} / ${T[sheaf_to_$cn]}" | bc -l | cut -c1-4)x the put's speed with one stripe, $(echo "${T[sftp_put_$cn]} / ${T[sheaf_to_2_stripes_$cn]}" | bc -l | cut -c1-4)x with two (reading and compressing the cluster included); against sheaf's backup of the same to local disk: $(echo "${T[sheaf_disk_$cn]} / ${T[sheaf_to_$cn]}" | bc -l | cut -c1-4)x"
  done
  if [ -n "${T[pgbackrest_zst]:-}" ]; then
    echo "sheaf into an SFTP repository against pgBackRest's (zstd level 1): $(echo "${T[pgbackrest_zst]} / ${T[sheaf_repo_zstd-low]}" | bc -l | cut -c1-4)x; restore: $(echo "${T[pgbackrest_restore_zst]} / ${T[sheaf_restore_zstd-low]}" | bc -l | cut -c1-4)x"
  fi
} | tee "$OUT/sftp.md"
