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
