# Shared by the benchmark scripts: PostgreSQL from Debian's packages, commands as its user.
export DEBIAN_FRONTEND=noninteractive

# The newest server bin directory, installing postgresql first if there is none.
pg_bin_dir() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }
  ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1
}

# Run a command as postgres when we are root (initdb refuses root), as ourselves otherwise.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# The repository belongs to the server's user, whose archive_command pushes into it, and sheaf
# writes into a repository only as its owner: "${AS_PG[@]}" "$S" backup ... runs it so (also
# under time or strace, which cannot run a shell function).
AS_PG=(); if [ "$(id -u)" -eq 0 ]; then AS_PG=(runuser -u postgres --); fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# `bench_workdir NAME WHY SUB...`: for a bench that must run as root (WHY says for what), a fresh
# work folder W under /var/tmp with the subfolders SUB... the server's user owns; on exit the
# cluster in $W/data is stopped, the processes in PIDS killed, and W removed.
bench_workdir() {
  local name=$1 why=$2; shift 2
  [ "$(id -u)" -eq 0 ] || { echo "$name: run as root ($why)" >&2; exit 2; }
  W=$(mktemp -d "/var/tmp/sheaf-$name.XXXXXX")
  chmod 755 "$W"
  local d
  for d in "$@"; do mkdir -p "$W/$d" && chown postgres "$W/$d"; done
  PIDS=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  as_pg "$PGBIN/pg_ctl" -D "$W/data" -m immediate stop >/dev/null 2>&1 || true
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}

# `start_primary DIR PORT ARCHIVE_COMMAND [LOG]`: initdb (data checksums on) into DIR with the
# benches' settings (its socket in $W/sock, no TCP, 256 MB of shared buffers, checkpoints held
# off, archiving with ARCHIVE_COMMAND), started, its log in LOG (default $W/sock/log).
start_primary() {
  local dir=$1 port=$2 archive=$3 log=${4:-$W/sock/log}
  as_pg "$PGBIN/initdb" -D "$dir" --data-checksums -A trust -U postgres >/dev/null
  cat >>"$dir/postgresql.conf" <<EOF
port = $port
unix_socket_directories = '$W/sock'
listen_addresses = ''
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
archive_mode = on
archive_command = '$archive'
EOF
  as_pg "$PGBIN/pg_ctl" -D "$dir" -l "$log" -w start >/dev/null
}

# Bytes the server on data directory `$1` (its postmaster and children) has read from disk.
server_reads() {
  local pm; pm=$(head -1 "$1/postmaster.pid")
  local sum=0 pid
  for pid in $pm $(pgrep -P "$pm"); do
    sum=$((sum + $(awk '/^read_bytes/ {print $2}' "/proc/$pid/io" 2>/dev/null || echo 0)))
  done
  echo $sum
}

# --- The TPC-H scripts' steps (bench-incremental.sh, bench-rewind.sh): they set $W (a work folder
# holding the socket folder $W/sock) and $PGBIN before calling these.

# psql on the server at port `$1`, unaligned, tuples only.
psql_at() { local port=$1; shift; as_pg "$PGBIN/psql" -h "$W/sock" -p "$port" -U postgres -Atq "$@"; }

now() { date +%s.%N; }
# `timed NAME CMD...`: run after sync (COLD=1: with the page cache dropped, root), NAME's seconds
# into T.
declare -A T
cold() { sync; if [ "${COLD:-0}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
timed() { local n=$1; shift; cold; local t0; t0=$(now); "$@"; T[$n]=$(echo "$(now) - $t0" | bc -l); echo "$n: ${T[$n]} s" >&2; }
# `field FILE EXPR`: EXPR of the JSON in FILE, as `d`.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# Switch the server at port `$1` to a new WAL segment and wait until its archiver has pushed it (a
# record written first: right after a switch, pg_switch_wal would do nothing).
archive_now() {
  local port=$1 seg
  seg=$(psql_at "$port" -c "SELECT pg_logical_emit_message(false, 'bench', 'x')" -c "SELECT pg_walfile_name(pg_switch_wal())" | tail -1)
  for _ in $(seq 600); do
    local last; last=$(psql_at "$port" -c "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
    [[ "$last" > "$seg" || "$last" == "$seg" ]] && return; sleep 0.2
  done
  echo "archiving stalled" >&2; exit 1
}

# On the server at port `$1`, touch about `$2` % of lineitem's and orders' pages (`$3` moves where):
# half scattered (every Nth page), half one contiguous run; the new row versions land on further
# pages. Then a checkpoint, and the WAL archived.
change() {
  local port=$1 pct=$2 off=$3
  for t in lineitem orders; do
    local col; col=$([ $t = lineitem ] && echo l_comment || echo o_comment)
    local pages; pages=$(psql_at "$port" -d tpch -c "SELECT relpages FROM pg_class WHERE relname = '$t'")
    local every; every=$(echo "scale=0; 200 / $pct" | bc)
    local run; run=$(echo "scale=0; $pages * $pct / 200" | bc)
    local from=$(( (pages * off / 100) % pages ))
    psql_at "$port" -d tpch -c "UPDATE $t SET $col = $col WHERE (ctid::text::point)[0]::bigint % $every = $off % $every OR (ctid::text::point)[0]::bigint BETWEEN $from AND $from + $run"
  done
  psql_at "$port" -d tpch -c "CHECKPOINT"
  archive_now "$port"
}
