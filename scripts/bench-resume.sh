#!/usr/bin/env bash
# docs/bench/resume (not a test), issue 54 part 2: a full backup killed (SIGKILL) at about half,
# then resumed by the next full backup, against a fresh full of the same cluster, pairwise in one
# run: fresh, killed + resumed, killed + resumed, fresh (the median of the two of each), into
#   a folder repository   killed once its stripe's .partial holds half of what a fresh one wrote
#   a MinIO bucket        killed once the parts its stripe's upload holds (ListParts) add up to
#                         half of what a fresh one wrote, and (bucket_timed) at half of a fresh
#                         full's time there
#   a backup host         a repository `sheaf agent --serve-repo` serves on loopback, over mutual
#                         TLS, killed once the agent's .partial holds half
# The cluster: TPC-H scale SCALE (default 1, sheaf load-tpch), vacuumed and checkpointed, no load;
# its WAL archived into both repositories. CODEC default zstd:low. Also: what the journal costs a
# full backup never stopped (the default against --no-resume, pairwise, in the folder). Reported: the resumed backup's
# time over the fresh full's (goal <= 0.6), what it took, read and kept, and beside them the time
# `cat` takes to read the data directory from a cold cache (the physical limit of a fresh full's reads).
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
bin=$HOME/.cache/sheaf/bin
[ -x "$bin/minio" ] || { echo "bench-resume: needs minio in $bin (scripts/install-deps.sh installs it)" >&2; exit 2; }
bench_workdir resume "the server runs as postgres" sock data repo out minio served certs
mport=$(free_port)
MINIO_ROOT_USER=sheafbench MINIO_ROOT_PASSWORD=sheafbench-secret MINIO_BROWSER=off MINIO_UPDATE=off \
  "$bin/minio" server --quiet --address "127.0.0.1:$mport" "$W/minio" >/dev/null 2>&1 &
PIDS+=($!)
aws="AWS_ACCESS_KEY_ID=sheafbench AWS_SECRET_ACCESS_KEY=sheafbench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$mport AWS_ALLOW_HTTP=true"
export $aws
for _ in $(seq 100); do
  curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user sheafbench:sheafbench-secret -X PUT "http://127.0.0.1:$mport/resume" >/dev/null && break
  sleep 0.2
done
bucket=s3://resume/pg
# The backup host's agent, and this host's certificate, granted repository pg.
as_pg "$S" agent --init-certs "$W/certs/tls" >/dev/null
as_pg "$S" agent --init-certs "$W/certs/tls" --add-client dbhost --grant pg >/dev/null
aport=$(free_port)
as_pg "$S" agent --listen "127.0.0.1:$aport" --serve-repo "pg=$W/served" --tls-dir "$W/certs/tls" 2>"$W/out/agent.log" &
PIDS+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$aport") 2>/dev/null && break; sleep 0.1; done
served=sheaf://127.0.0.1:$aport/pg
export SHEAF_TLS_DIR=$W/certs/tls/clients/dbhost
port=$(free_port)
start_primary "$W/data" "$port" "env $aws SHEAF_TLS_DIR=$SHEAF_TLS_DIR $S wal-push %p --repo $W/repo --repo $bucket --repo $served"
url="postgresql://postgres@/postgres?host=$W/sock&port=$port"
tpch="postgresql://postgres@/tpch?host=$W/sock&port=$port"
"${AS_PG[@]}" env $aws "$S" init --repo "$W/repo" "$url" >/dev/null
"${AS_PG[@]}" env $aws "$S" init --repo "$bucket" "$url" >/dev/null
"${AS_PG[@]}" env SHEAF_TLS_DIR="$SHEAF_TLS_DIR" "$S" init --repo "$served" "$url" >/dev/null
psql_at "$port" -c "CREATE DATABASE tpch" >/dev/null
echo "bench-resume: loading TPC-H scale $SCALE" >&2
"${AS_PG[@]}" "$S" load-tpch "$tpch" --scale "$SCALE" >/dev/null
psql_at "$port" -d tpch -c "VACUUM (FREEZE, ANALYZE)" -c "CHECKPOINT" >/dev/null
# Files last written more than a second before any attempt begins.
sleep 2

declare -A T
backup() { local repo=$1; shift; "${AS_PG[@]}" env $aws SHEAF_TLS_DIR="$SHEAF_TLS_DIR" "$S" backup "$url" --repo "$repo" --compression "$CODEC" --json "$@"; }
fresh() { timed "$1_fresh$2" backup "$3" --no-resume >"$W/out/$1_fresh$2.json"; }
resumed() { timed "$1_resumed$2" backup "$3" >"$W/out/$1_resumed$2.json"; }
# Killed once the unfinished stripe in folder DIR (of repository REPO: the folder itself, or the
# one the agent serves) holds `half` bytes; the kill hits sheaf, not runuser (which reaps it).
killed_in() {
  local repo=$1 dir=$2
  backup "$repo" >/dev/null 2>&1 &
  local started=$! p=""
  for _ in $(seq 6000); do
    p=$(ls "$dir"/backups/*/*_1.sheaf.partial 2>/dev/null | head -1 || true)
    if [ -n "$p" ] && [ "$(stat -c %s "$p")" -ge "$half" ]; then break; fi
    sleep 0.01
  done
  pkill -9 -f -- "^$S backup .* --repo $repo --compression" || true
  wait "$started" 2>/dev/null || true
  echo "$repo: killed with its stripe at $(stat -c %s "$p") bytes" >&2
}
killed_folder() { killed_in "$W/repo" "$W/repo"; }
# Killed once the parts its stripe's upload holds (ListParts, as the next attempt sees them) add up
# to `half` bytes of what a fresh one wrote: boto3 (from the moto environment scripts/install-deps.sh
# makes) polls every 20 ms. MinIO lists the uploads of one object name only: the backup's id comes
# from its journal's objects.
py=$bin/../moto/bin/python3; [ -x "$py" ] || py=python3
killed_bucket() {
  backup "$bucket" >/dev/null 2>&1 &
  local started=$! got
  got=$(HALF=$half PATTERN="^$S backup .* --repo $bucket --compression" "$py" - <<'PY'
import os, re, subprocess, time, boto3
s3 = boto3.client("s3")
half, got = int(os.environ["HALF"]), 0
for _ in range(3000):
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="resume", Prefix="pg/backups/").get("Contents", [])]
    ids = sorted({m.group(1) for k in keys if (m := re.match(r"pg/backups/([^/]+)/resume-", k))})
    if ids:
        key = f"pg/backups/{ids[-1]}/{ids[-1]}_1.sheaf"
        for u in s3.list_multipart_uploads(Bucket="resume", Prefix=key).get("Uploads", []):
            parts = s3.list_parts(Bucket="resume", Key=key, UploadId=u["UploadId"]).get("Parts", [])
            got = max(got, sum(p["Size"] for p in parts))
    if got >= half:
        # Killed from here, at once: parts go on landing while the poller exits.
        subprocess.run(["pkill", "-9", "-f", "--", os.environ["PATTERN"]])
        break
    time.sleep(0.02)
print(got)
PY
)
  pkill -9 -f -- "^$S backup .* --repo $bucket --compression" || true
  wait "$started" 2>/dev/null || true
  echo "bucket: killed with its upload's parts at $got bytes" >&2
}

fresh folder 1 "$W/repo"
half=$(( $(field "$W/out/folder_fresh1.json" "d['bytes_written']") / 2 ))
killed_folder; resumed folder 1 "$W/repo"
killed_folder; resumed folder 2 "$W/repo"
fresh folder 2 "$W/repo"

# What the journal costs a backup that is never stopped: the default against --no-resume.
journaled() { timed "folder_journaled$1" backup "$W/repo" >"$W/out/folder_journaled$1.json"; }
plain() { timed "folder_plain$1" backup "$W/repo" --no-resume >"$W/out/folder_plain$1.json"; }
journaled 1; plain 1; plain 2; journaled 2

# Also killed at half of a fresh full's time there, as an observer without ListParts would: the
# parts in flight and the one being filled are lost, so less than half is kept.
killed_bucket_timed() {
  backup "$bucket" >/dev/null 2>&1 &
  local started=$!
  sleep "$half_s"
  pkill -9 -f -- "^$S backup .* --repo $bucket --compression" || true
  wait "$started" 2>/dev/null || true
  echo "bucket: killed after $half_s s" >&2
}

fresh host 1 "$served"
half=$(( $(field "$W/out/host_fresh1.json" "d['bytes_written']") / 2 ))
killed_in "$served" "$W/served"; resumed host 1 "$served"
killed_in "$served" "$W/served"; resumed host 2 "$served"
fresh host 2 "$served"

fresh bucket 1 "$bucket"
half=$(( $(field "$W/out/bucket_fresh1.json" "d['bytes_written']") / 2 ))
half_s=$(echo "${T[bucket_fresh1]} / 2" | bc -l)
killed_bucket; resumed bucket 1 "$bucket"
killed_bucket; resumed bucket 2 "$bucket"
killed_bucket_timed; resumed bucket_timed 1 "$bucket"
killed_bucket_timed; resumed bucket_timed 2 "$bucket"
fresh bucket 2 "$bucket"

sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); find "$W/data/base" -type f -exec cat {} + >/dev/null; cat_s=$(echo "$(now) - $t0" | bc -l)
{
  echo "# sheaf backup resumed after a kill at about half, against a fresh full (TPC-H scale $SCALE, $CODEC)"
  echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD), $(nproc) cores"
  for where in folder host bucket bucket_timed; do
    fw=${where%_timed}
    f=$(printf '%s\n' "${T[${fw}_fresh1]}" "${T[${fw}_fresh2]}" | median)
    r=$(printf '%s\n' "${T[${where}_resumed1]}" "${T[${where}_resumed2]}" | median)
    printf '%-12s fresh full %7.2f s (runs %.2f %.2f), resumed %7.2f s (runs %.2f %.2f): ratio %s (goal <= 0.6)\n' \
      "$where" "$f" "${T[${fw}_fresh1]}" "${T[${fw}_fresh2]}" "$r" "${T[${where}_resumed1]}" "${T[${where}_resumed2]}" "$(echo "scale=3; $r / $f" | bc -l)"
    for i in 1 2; do
      echo "  resumed$i: $(field "$W/out/${where}_resumed$i.json" "'read %d bytes, took %d files (%d bytes) from the attempt before, kept %d stored bytes, wrote %d' % (d['bytes_read'], d['resumed']['files'], d['resumed']['bytes'], d['resumed']['kept_stored_bytes'], d['bytes_written'])")"
    done
    [ "$fw" = "$where" ] && echo "  fresh: read $(field "$W/out/${where}_fresh1.json" "d['bytes_read']") bytes, wrote $(field "$W/out/${where}_fresh1.json" "d['bytes_written']")"
  done
  j=$(printf '%s\n' "${T[folder_journaled1]}" "${T[folder_journaled2]}" | median)
  p=$(printf '%s\n' "${T[folder_plain1]}" "${T[folder_plain2]}" | median)
  printf 'journal overhead (folder, never stopped): default %.2f s (runs %.2f %.2f), --no-resume %.2f s (runs %.2f %.2f): ratio %s\n' \
    "$j" "${T[folder_journaled1]}" "${T[folder_journaled2]}" "$p" "${T[folder_plain1]}" "${T[folder_plain2]}" "$(echo "scale=3; $j / $p" | bc -l)"
  printf 'physical limit: cat of the data directory from a cold cache %.2f s\n' "$cat_s"
} | tee "$OUT"
