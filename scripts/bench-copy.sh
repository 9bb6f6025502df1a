#!/usr/bin/env bash
# docs/bench/copy (not a test), issue 54: `sheaf copy` against the raw transfer of the same bytes,
# pairwise in one run (A B, then B A; the median of the two of each):
#   folder -> MinIO   sheaf copy --all                 vs  mc cp --recursive of the repository folder
#                     (and again with --s3-parts-in-flight 4: mc keeps more parts in flight)
#   MinIO -> folder   sheaf copy --all back            vs  mc cp --recursive down
#   folder -> folder  sheaf copy --all                 vs  cp -r
#   folder -> encrypted folder (every frame sealed on the way)           vs  cp -r
#   encrypted -> encrypted folder, another passphrase (key blocks only)  vs  cp -r of the source
# Into a folder, the raw tool's time includes `sync -f` of the file system after it: sheaf's copy
# is durable when it returns (each object fsynced before it is published), cp's and mc's are not.
# The repository: a pgbench cluster (SCALE, default 150) backed up full (CODEC, default lz4), then PGBENCH
# seconds of pgbench archived. The raw tools copy the same bytes: the objects sheaf copies (the
# backup, the WAL from its start on), as its first copy laid them out. Every copy lands in a place
# of its own (a fresh bucket, a new folder).
#   [SCALE=150] [PGBENCH=30] [CODEC=lz4] [OUT=copy-bench.txt] scripts/bench-copy.sh    (root: the server runs as postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
SCALE=${SCALE:-150}
PGBENCH=${PGBENCH:-30}
CODEC=${CODEC:-lz4}
OUT=$(realpath -m "${OUT:-copy-bench.txt}")
PGBIN=$(pg_bin_dir)
bin=$HOME/.cache/sheaf/bin
[ -x "$bin/minio" ] && [ -x "$bin/mc" ] || { echo "bench-copy: needs minio and mc in $bin (scripts/install-deps.sh installs minio; go install github.com/minio/mc@latest)" >&2; exit 2; }
bench_workdir copy "the server runs as postgres" sock data repo out minio enc1 enc2
port=$(free_port)
mport=$(free_port)
MINIO_ROOT_USER=sheafbench MINIO_ROOT_PASSWORD=sheafbench-secret MINIO_BROWSER=off MINIO_UPDATE=off \
  "$bin/minio" server --quiet --address "127.0.0.1:$mport" "$W/minio" >/dev/null 2>&1 &
PIDS+=($!)
export AWS_ACCESS_KEY_ID=sheafbench AWS_SECRET_ACCESS_KEY=sheafbench-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$mport AWS_ALLOW_HTTP=true
mc() { "$bin/mc" --config-dir "$W/mc" --quiet "$@"; }
for _ in $(seq 100); do mc alias set b "http://127.0.0.1:$mport" sheafbench sheafbench-secret >/dev/null 2>&1 && break; sleep 0.2; done

start_primary "$W/data" "$port" "$S wal-push %p --repo $W/repo"
url="postgresql://postgres@/postgres?host=$W/sock&port=$port"
as_pg "$S" init --repo "$W/repo" "$url" >/dev/null
as_pg "$PGBIN/pgbench" -h "$W/sock" -p "$port" -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
as_pg "$S" backup "$url" --repo "$W/repo" --compression "$CODEC" >/dev/null
as_pg "$PGBIN/pgbench" -h "$W/sock" -p "$port" -U postgres -n -c 2 -j 2 -T "$PGBENCH" postgres >/dev/null 2>&1
as_pg "$PGBIN/psql" -h "$W/sock" -p "$port" -U postgres -Atq -c "SELECT pg_switch_wal()" >/dev/null
sleep 2
# Empty encrypted repositories of the cluster, one per passphrase: each encrypted copy goes into a
# fresh copy of one of them.
printf 'the first passphrase\n' >"$W/p1"; printf 'the second passphrase\n' >"$W/p2"
chmod 600 "$W/p1" "$W/p2"; chown postgres "$W/p1" "$W/p2" 2>/dev/null || true
as_pg "$S" init --repo "$W/enc1" --passphrase-file "$W/p1" "$url" >/dev/null
as_pg "$S" init --repo "$W/enc2" --passphrase-file "$W/p2" "$url" >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$W/data" -m fast -w stop >/dev/null
bytes=$(du -sb "$W/repo" | cut -f1)
files=$(find "$W/repo" -type f | wc -l)
echo "bench-copy: the repository holds $files files, $bytes bytes" >&2

declare -A T
timed_pair() { # NAME CMD...: time it, the seconds in T[NAME] (appended)
  local n=$1; shift
  local t0; t0=$(now)
  "$@" >"$W/out/$n.last" 2>&1
  T[$n]="${T[$n]:-} $(echo "$(now) - $t0" | bc -l)"
}
bucket() { mc rb --force "b/copy-$1" >/dev/null 2>&1 || true; mc mb "b/copy-$1" >/dev/null; }
up_sheaf() { bucket "s$1"; timed_pair up_sheaf "$S" copy --repo "$W/repo" --to-repo "s3://copy-s$1/pg" --all --json; }
up4_sheaf() { bucket "t$1"; timed_pair up4_sheaf "$S" copy --repo "$W/repo" --to-repo "s3://copy-t$1/pg" --all --json --s3-parts-in-flight 4; }
up4_mc() { bucket "n$1"; timed_pair up4_mc mc cp --recursive "$W/same/" "b/copy-n$1/pg/"; }
up_mc() { bucket "m$1"; timed_pair up_mc mc cp --recursive "$W/same/" "b/copy-m$1/pg/"; }
down_sheaf() { timed_pair down_sheaf "$S" copy --repo "s3://copy-s1/pg" --to-repo "$W/out/sd$1" --all --json; }
mc_down() { mc cp --recursive "b/copy-m1/pg/" "$W/out/md$1/" && sync -f "$W/out"; }
down_mc() { timed_pair down_mc mc_down "$1"; }
fresh_enc() { rm -rf "$W/out/$2"; cp -r "$W/$1" "$W/out/$2"; }
seal_sheaf() { fresh_enc enc1 "se$1"; timed_pair seal_sheaf "$S" copy --repo "$W/repo" --to-repo "$W/out/se$1" --to-passphrase-file "$W/p1" --all --json; }
seal_cp() { timed_pair seal_cp cp_local "s$1"; }
rekey_sheaf() { fresh_enc enc2 "re$1"; timed_pair rekey_sheaf "$S" copy --repo "$W/enc-src" --passphrase-file "$W/p1" --to-repo "$W/out/re$1" --to-passphrase-file "$W/p2" --all --json; }
cp_enc() { cp -r "$W/enc-src" "$W/out/ce$1" && sync -f "$W/out"; }
rekey_cp() { timed_pair rekey_cp cp_enc "$1"; }
local_sheaf() { timed_pair local_sheaf "$S" copy --repo "$W/repo" --to-repo "$W/out/sl$1" --all --json; }
cp_local() { cp -r "$W/same" "$W/out/cl$1" && sync -f "$W/out"; }
local_cp() { timed_pair local_cp cp_local "$1"; }

# The bytes sheaf copies, laid out by a first copy: what the raw tools move.
"$S" copy --repo "$W/repo" --to-repo "$W/same" --all >/dev/null
bytes=$(du -sb "$W/same" | cut -f1)
files=$(find "$W/same" -type f | wc -l)
echo "bench-copy: a copy holds $files files, $bytes bytes" >&2
sync
up_sheaf 1; up_mc 1; up_mc 2; up_sheaf 2
up4_sheaf 1; up4_mc 1; up4_mc 2; up4_sheaf 2
down_sheaf 1; down_mc 1; down_mc 2; down_sheaf 2
local_sheaf 1; local_cp 1; local_cp 2; local_sheaf 2
seal_sheaf 1; seal_cp 1; seal_cp 2; seal_sheaf 2
# The encrypted source: a sealed copy, laid out as the encrypted routes' raw tool moves it.
fresh_enc enc1 enc-src; mv "$W/out/enc-src" "$W/enc-src"
"$S" copy --repo "$W/repo" --to-repo "$W/enc-src" --to-passphrase-file "$W/p1" --all >/dev/null
sync
rekey_sheaf 1; rekey_cp 1; rekey_cp 2; rekey_sheaf 2
frames=$(field "$W/out/local_sheaf.last" "d['frames']")
objects=$(field "$W/out/local_sheaf.last" "d['objects']")

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
{
  echo "# sheaf copy against the raw transfer of the same bytes ($(date -u +%F), commit $(git rev-parse --short HEAD), $(nproc) cores)"
  echo "repository: pgbench scale $SCALE backed up ($CODEC), $PGBENCH s of pgbench archived; a copy (the backup, the WAL from its start on, the repository's own records): $files files, $bytes bytes, what every route moves; sheaf checked $frames frames in $objects objects per copy"
  echo
  echo "| route | sheaf copy (s) | raw (s) | raw tool | sheaf / raw throughput | runs (sheaf; raw) |"
  echo "|---|---|---|---|---|---|"
  for r in "up:folder -> MinIO:mc cp" "up4:folder -> MinIO, --s3-parts-in-flight 4:mc cp" "down:MinIO -> folder:mc cp, sync" "local:folder -> folder:cp -r, sync" \
    "seal:folder -> encrypted folder, sealed on the way:cp -r (of the plain copy), sync" "rekey:encrypted -> encrypted folder, another passphrase:cp -r (of the encrypted copy), sync"; do
    IFS=: read -r k name tool <<<"$r"
    case $k in local) raw=local_cp ;; seal) raw=seal_cp ;; rekey) raw=rekey_cp ;; *) raw="${k}_mc" ;; esac
    s=$(med "${T[${k}_sheaf]}"); x=$(med "${T[$raw]}")
    printf '| %s | %.2f | %.2f | %s | %.2f | %s; %s |\n' "$name" "$s" "$x" "$tool" "$(echo "$x / $s" | bc -l)" "${T[${k}_sheaf]# }" "${T[$raw]# }"
  done
} | tee "$OUT"
