#!/bin/bash
# Rotation cost at two repository sizes: a small one (one backup) and a larger one (pgbench scale
# 20, eleven backups and their WAL).
set -euo pipefail
# Run as the user PostgreSQL runs as (initdb refuses root): su postgres -c scripts/bench-key-rotate.sh
S=${SHEAF:-target/release/sheaf}
B=/usr/lib/postgresql/15/bin
W=$(mktemp -d /tmp/rot.XXXX); chmod 755 $W
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
$B/initdb -D $W/data -A trust -U postgres >/dev/null
echo "port=$PORT
unix_socket_directories='$W'
listen_addresses=''
archive_mode=on
archive_command='$S wal-push %p --repo $W/repo --passphrase-file $W/pass'" >> $W/data/postgresql.conf
echo "rotate me" > $W/pass; chmod 600 $W/pass
$B/pg_ctl -D $W/data -l $W/log -w start >/dev/null
URL="postgres://postgres@/postgres?host=$W&port=$PORT"
$S init --repo $W/repo --passphrase-file $W/pass "$URL" >/dev/null
$S backup "$URL" --repo $W/repo --passphrase-file $W/pass >/dev/null
$S key add --repo $W/repo --passphrase-file $W/pass --new-passphrase-file <(echo second) >/dev/null
measure() {
  local size=$(du -sb $W/repo | cut -f1)
  local t0=$(date +%s.%N)
  local out=$($S key rotate --repo $W/repo --passphrase-file $W/pass --json)
  local t1=$(date +%s.%N)
  echo "repo $size bytes, $(ls $W/repo/backups/*.json | wc -l) backups, $(find $W/repo/wal -type f | wc -l) WAL files: rotate $(echo "$t1 - $t0" | bc) s, $(echo "$out" | python3 -c 'import json,sys;d=json.load(sys.stdin);print(d["records"],"records",d["bytes_written"],"bytes")')"
}
measure; measure
$B/pgbench -q -i -s 20 -h $W -p $PORT -U postgres postgres 2>/dev/null
for i in $(seq 1 10); do $B/pgbench -T 2 -h $W -p $PORT -U postgres postgres >/dev/null 2>&1; $S backup "$URL" --repo $W/repo --passphrase-file $W/pass >/dev/null; done
measure; measure
$B/pg_ctl -D $W/data -m immediate stop >/dev/null
rm -rf $W
