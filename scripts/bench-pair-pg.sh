#!/usr/bin/env bash
# Pairwise (issue 35): a PostgreSQL backup (pgbench scale $SCALE) with two builds of sheaf, OLD and
# NEW (default target/release/sheaf), timed by farm-bench --vs: a backup to a file, then its restore.
#   OLD=/path/to/old/sheaf [NEW=...] [SCALE=50] scripts/bench-pair-pg.sh   (as root; needs farm-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
OLD=${OLD:?"give the other build: OLD=/path/to/sheaf"}; NEW=${NEW:-$PWD/target/release/sheaf}
SCALE=${SCALE:-50}; W=/var/tmp/pgpair; PGBIN=$(pg_bin_dir)
rm -rf $W; mkdir -p $W/sock $W/out; chmod 755 $W; chown postgres $W $W/sock $W/out
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
runuser -u postgres -- $PGBIN/initdb -D $W/data --data-checksums -A trust -U postgres >/dev/null
printf "port=$PORT\nunix_socket_directories='$W/sock'\nlisten_addresses=''\nshared_buffers=256MB\nmax_wal_size=4GB\n" >> $W/data/postgresql.conf
runuser -u postgres -- $PGBIN/pg_ctl -D $W/data -l $W/sock/log -w start >/dev/null
trap 'runuser -u postgres -- $PGBIN/pg_ctl -D $W/data -m immediate stop >/dev/null 2>&1 || true; rm -rf $W' EXIT
runuser -u postgres -- $PGBIN/pgbench -h $W/sock -p $PORT -U postgres -i -s $SCALE -q postgres >/dev/null 2>&1
runuser -u postgres -- $PGBIN/psql -h $W/sock -p $PORT -U postgres -qc CHECKPOINT
URL="postgres://postgres@localhost:$PORT/postgres?host=$W/sock"
du -sh $W/data
cd $W/out
P="runuser -u postgres --"
echo "== backup to a file, zstd:low"
farm-bench -n 5 --timeout 1200 --vs "env SHEAF_CATALOG=$W/out/old.db $P $OLD backup $URL --to $W/out/o_old.sheaf -c zstd:low --overwrite" -- env SHEAF_CATALOG=$W/out/new.db $P $NEW backup $URL --to $W/out/o_new.sheaf -c zstd:low --overwrite
echo "== restore of that file into a fresh folder"
farm-bench -n 5 --timeout 1200 --vs "sh -c 'rm -rf $W/out/r_old && SHEAF_CATALOG=$W/out/old.db exec $OLD restore $W/out/o_old.sheaf --to $W/out/r_old'" -- sh -c "rm -rf $W/out/r_new && SHEAF_CATALOG=$W/out/new.db exec $NEW restore $W/out/o_new.sheaf --to $W/out/r_new"
