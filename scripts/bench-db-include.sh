#!/usr/bin/env bash
# docs/bench/db-include (not a test): four equal databases, one backup, --db-include d2 against
# a full restore, each into a fresh ext4 on a loop device, AB BA.
#   [WORK=/var/tmp/sheaf-dbinc] [OUT=db-include-ab.txt] scripts/bench-db-include.sh   (root: loop devices)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
S=$PWD/target/release/sheaf
N=${WORK:-/var/tmp/sheaf-dbinc}; mkdir -p "$N"
PGBIN=$(pg_bin_dir); W=$N/four; rm -rf $W; mkdir -p $W/sock; chown -R postgres $W
port=$(free_port)
# Ctrl-C or a failure: the server stopped, the work folder removed (the loop device is
# db-include-ab.sh's to release).
trap 'as_pg $PGBIN/pg_ctl -D $W/pg -m immediate stop >/dev/null 2>&1 || true; rm -rf $W $N/dbinc $N/loop.img' EXIT
as_pg $PGBIN/initdb -D $W/pg -A trust -U postgres -k >/dev/null
as_pg $PGBIN/pg_ctl -D $W/pg -l $W/pg.log -w -o "-p $port -k $W/sock -c listen_addresses='' -c max_wal_size=4GB" start >/dev/null
for d in d1 d2 d3 d4; do
  as_pg $PGBIN/psql -qAt -h $W/sock -p $port -U postgres -c "CREATE DATABASE $d"
  as_pg $PGBIN/psql -qAt -h $W/sock -p $port -U postgres -d $d -c "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 4000000) g; CREATE INDEX ON t (id); CHECKPOINT"
done
as_pg $PGBIN/psql -qAt -h $W/sock -p $port -U postgres -c "SELECT datname, pg_size_pretty(pg_database_size(datname)) FROM pg_database WHERE datname LIKE 'd%'"
$S backup "postgresql://postgres@/postgres?host=$W/sock&port=$port" --to $W/four.sheaf --json > $W/backup.json
python3 -c "import json; v=json.load(open('$W/backup.json')); print('backup read', v['bytes_read'], 'wrote', v['bytes_written'])"
as_pg $PGBIN/pg_ctl -D $W/pg -w -m fast stop >/dev/null
rm -rf $W/pg
FRESH=$N/loop.img scripts/db-include-ab.sh $W/four.sheaf d2 $N/dbinc 3
cp $N/dbinc/db-include-ab.txt ${OUT:-db-include-ab.txt}
