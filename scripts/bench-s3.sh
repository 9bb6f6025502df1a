#!/usr/bin/env bash
# Object storage benchmark (not a test), issue 8: one TPC-H cluster, one local MinIO speaking HTTPS
# (pgBackRest speaks nothing else; sheaf uses the same endpoint, so both pay for TLS), and in one
# run:
#   1. sheaf bench: none, lz4 and zstd:low to 1, 2 and 4 stripes, to local disk and to S3 (backup,
#      verify and restore timed, peak RSS), median of REPEAT;
#   2. the upload ceiling: about the bytes of the `none` backup (the data directory's files but WAL, in one
#      file) uploaded with `mc cp`, MinIO's own client, and downloaded back;
#   3. pgBackRest with repo1-type=s3 on the same server, same codecs and levels, process-max = cores:
#      full backup and restore, median of REPEAT; each binary in PGBACKREST (default: Debian's
#      pgbackrest; PGBACKREST="pgbackrest $(scripts/build-pgbackrest.sh)" adds the newest, 2.60,
#      with its object-store read prefetch at its default), each into a repository of its own.
# Writes OUT/ (sheaf's report, ceiling.csv, pgbackrest.csv, summary.md).
#
#   SCALE=1 REPEAT=3 OUT=s3-report scripts/bench-s3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
SCALE=${SCALE:-1}
REPEAT=${REPEAT:-3}
OUT=$(realpath -m "${OUT:-s3-report}")
STRIPES=${STRIPES:-1,2,4}
CODECS=${CODECS:-none,lz4,zstd:low}
sheaf=$PWD/target/release/sheaf
cores=$(nproc)
bin=$HOME/.cache/sheaf/bin
minio=${SHEAF_MINIO:-$bin/minio}
[ -x "$minio" ] || scripts/install-deps.sh
if [ ! -x "$bin/mc" ]; then
  echo "bench-s3: building mc (MinIO's client) with go install" >&2
  PATH="$PATH:/usr/local/go/bin" GOBIN="$bin" go install github.com/minio/mc@latest
fi
mc="$bin/mc"
command -v pgbackrest >/dev/null || scripts/install-deps.sh
PGBACKREST=${PGBACKREST:-pgbackrest}
pgbin=$(pg_bin_dir)
[ -x "$sheaf" ] || cargo build --release --locked

work=$(mktemp -d "${TMPDIR:-/var/tmp}/sheaf-s3bench.XXXXXX")
chmod 755 "$work"
pguser=postgres
id $pguser >/dev/null 2>&1 || useradd -r -m $pguser
minio_pid=""
cleanup() {
  as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -m immediate stop >/dev/null 2>&1 || true
  [ -z "$minio_pid" ] || kill "$minio_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${BENCH_KEEP:-}" ]; then echo "bench-s3: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$OUT"

# --- MinIO over HTTPS: a CA, and a certificate for 127.0.0.1 signed by it.
key=sheafbench secret=sheafbench-secret-key
mkdir -p "$work/certs" "$work/minio"
( cd "$work/certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sheaf bench CA" -keyout ca.key -out ca.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout private.key -out server.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out public.crt 2>/dev/null
  mkdir -p ../ca && mv ca.crt ca.key ../ca/ )
s3port=$(free_port)
MINIO_ROOT_USER=$key MINIO_ROOT_PASSWORD=$secret MINIO_BROWSER=off MINIO_UPDATE=off \
  "$minio" server "$work/minio" --quiet --address "127.0.0.1:$s3port" --console-address "127.0.0.1:$(free_port)" \
  --certs-dir "$work/certs" >"$work/minio.log" 2>&1 &
minio_pid=$!
export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=https://127.0.0.1:$s3port AWS_CA_BUNDLE=$work/ca/ca.crt
export MC_CONFIG_DIR=$work/mc
for _ in $(seq 100); do "$mc" --insecure alias set bench "$AWS_ENDPOINT_URL" $key $secret >/dev/null 2>&1 && break; sleep 0.2; done
for b in sheaf pgbr ceiling; do "$mc" --insecure mb -p "bench/$b" >/dev/null; done
echo "== MinIO on https://127.0.0.1:$s3port (data in $work/minio)" >&2

# --- The cluster: TPC-H, then archiving ready for pgBackRest (a no-op while sheaf runs).
pgport=$(free_port)
mkdir -p "$work/pgdata" "$work/sock" "$work/log" "$work/disk" "$work/pgbr-lock" "$work/pgbr-log"
chown -R $pguser "$work/pgdata" "$work/sock" "$work/log" "$work/pgbr-lock" "$work/pgbr-log"
as_pg "$pgbin/initdb" -D "$work/pgdata" --data-checksums -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pgdata" -l "$work/log/pg.log" -w \
  -o "-p $pgport -k $work/sock -c listen_addresses='' -c max_wal_size=4GB -c archive_mode=on" start >/dev/null
url="postgres://postgres@localhost:$pgport/postgres?host=$work/sock"
# In postgresql.auto.conf, not on the command line, so that pgBackRest's can replace it later.
as_pg psql -q -h "$work/sock" -p "$pgport" -U postgres -d postgres -c "ALTER SYSTEM SET archive_command = '/bin/true'" -c "SELECT pg_reload_conf()" >/dev/null
echo "== TPC-H scale $SCALE" >&2
"$sheaf" load-tpch "$url" --scale "$SCALE" 2>/dev/null
as_pg psql -q -h "$work/sock" -p "$pgport" -U postgres -d postgres -c "VACUUM ANALYZE" -c "CHECKPOINT"
data_bytes=$(du -sb "$work/pgdata" | cut -f1)
echo "== data directory: $((data_bytes / 1000000)) MB" >&2

# --- 1. sheaf: disk and S3 in one sweep.
echo "== sheaf bench: $CODECS x $STRIPES stripes x disk, s3 (repeat $REPEAT)" >&2
"$sheaf" --catalog "$work/catalog.db" bench "$url" --target "$work/disk,s3://sheaf/run" -c "$CODECS" --stripes "$STRIPES" \
  --repeat "$REPEAT" --restore-dir "$work/disk" --out "$OUT/sheaf" >"$OUT/sheaf.txt"

# --- 2. The ceiling: the data directory's bytes as one object, up and down with mc.
find "$work/pgdata" -path "$work/pgdata/pg_wal" -prune -o -type f -print0 | sort -z | xargs -0 cat > "$work/all.bin"
size=$(stat -c %s "$work/all.bin")
echo "run,upload_s,download_s,bytes" > "$OUT/ceiling.csv"
for r in $(seq "$REPEAT"); do
  sync
  t0=$(date +%s.%N); "$mc" --insecure cp --quiet "$work/all.bin" bench/ceiling/all.bin >/dev/null; t1=$(date +%s.%N)
  rm -f "$work/down.bin"; sync
  t2=$(date +%s.%N); "$mc" --insecure cp --quiet bench/ceiling/all.bin "$work/down.bin" >/dev/null; sync; t3=$(date +%s.%N)
  cmp "$work/all.bin" "$work/down.bin"
  echo "$r,$(echo "$t1 - $t0" | bc),$(echo "$t3 - $t2" | bc),$size" >> "$OUT/ceiling.csv"
  "$mc" --insecure rm --quiet bench/ceiling/all.bin >/dev/null
done
rm -f "$work/all.bin" "$work/down.bin"

# --- 3. pgBackRest with its repository in the same MinIO.
echo "version,codec,run,backup_s,restore_s,repo_bytes" > "$OUT/pgbackrest.csv"
n=0
for pgbr in $PGBACKREST; do
n=$((n + 1))
version=$($pgbr version | awk '{print $2}')
echo "== pgBackRest $version ($pgbr)" >&2
conf=$work/pgbackrest-$n.conf
cat > "$conf" <<EOF
[global]
repo1-type=s3
repo1-path=/repo-$n
repo1-s3-bucket=pgbr
repo1-s3-endpoint=127.0.0.1
repo1-storage-port=$s3port
repo1-s3-region=us-east-1
repo1-s3-key=$key
repo1-s3-key-secret=$secret
repo1-s3-uri-style=path
repo1-storage-verify-tls=n
repo1-retention-full=9999
process-max=$cores
start-fast=y
log-level-console=warn
log-level-file=off
lock-path=$work/pgbr-lock
log-path=$work/pgbr-log

[bench]
pg1-path=$work/pgdata
pg1-port=$pgport
pg1-socket-path=$work/sock
EOF
chown $pguser "$conf"
br() { as_pg "$pgbr" --config="$conf" --stanza=bench "$@"; }
br stanza-create
as_pg psql -q -h "$work/sock" -p "$pgport" -U postgres -d postgres \
  -c "ALTER SYSTEM SET archive_command = '$pgbr --config=$conf --stanza=bench archive-push %p'" -c "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 50); do
  as_pg psql -qAt -h "$work/sock" -p "$pgport" -U postgres -d postgres -c "SHOW archive_command" | grep -q "pgbackrest-$n.conf" && break
  sleep 0.1
done
br check
IFS=, read -ra codecs <<< "$CODECS"
for c in "${codecs[@]}"; do
  case $c in
    none) args=(--compress-type=none) ;;
    lz4) args=(--compress-type=lz4 --compress-level=1) ;;
    zstd:low) args=(--compress-type=zst --compress-level=1) ;;
    zstd:medium) args=(--compress-type=zst --compress-level=3) ;;
    *) echo "bench-s3: no pgBackRest setting for $c" >&2; continue ;;
  esac
  for r in $(seq "$REPEAT"); do
    # Untimed: only the newest set is kept, so each run writes a full backup into a lean repository.
    for label in $(br info --output=json | python3 -c 'import json,sys; b=json.load(sys.stdin)[0]["backup"]; print(" ".join(x["label"] for x in b))'); do
      br expire --set="$label" >/dev/null 2>&1 || true
    done
    sync
    t0=$(date +%s.%N); br backup --type=full "${args[@]}"; t1=$(date +%s.%N)
    bytes=$(br info --output=json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["backup"][-1]["info"]["repository"]["delta"])')
    rm -rf "$work/pgbr-restore"; mkdir -p "$work/pgbr-restore"; chown $pguser "$work/pgbr-restore"; chmod 700 "$work/pgbr-restore"
    sync
    t2=$(date +%s.%N); br restore --pg1-path="$work/pgbr-restore" >/dev/null; sync; t3=$(date +%s.%N)
    echo "$version,$c,$r,$(echo "$t1 - $t0" | bc),$(echo "$t3 - $t2" | bc),$bytes" >> "$OUT/pgbackrest.csv"
    rm -rf "$work/pgbr-restore"
  done
done
done

# --- The summary: medians, and the ratios the issue asks for.
commit=$("$sheaf" version --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["commit"])')
python3 - "$OUT" "$size" "$commit" <<'PY'
import csv, statistics, sys, os, datetime
out, size, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
med = statistics.median
rows = list(csv.DictReader(open(os.path.join(out, "sheaf", "report.csv"))))
ceil = list(csv.DictReader(open(os.path.join(out, "ceiling.csv"))))
br = list(csv.DictReader(open(os.path.join(out, "pgbackrest.csv"))))
up = med(float(r["upload_s"]) for r in ceil); down = med(float(r["download_s"]) for r in ceil)
f = lambda r, k: float(r[k]) if r.get(k) else None
lines = ["# sheaf to S3: summary", "", f"> Measured on commit {commit} ({datetime.date.today().isoformat()}).", "",
         f"Data directory (WAL excluded) as one object: {size/1e6:.0f} MB; `mc cp` up {up:.2f} s ({size/up/1e6:.0f} MB/s), down {down:.2f} s ({size/down/1e6:.0f} MB/s).", "",
         "| codec | stripes | target | backup s | MB/s | restore s | verify s | size MB | backup peak RSS MiB | restore peak RSS MiB |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    if r["tool"] != "sheaf":
        continue
    b = f(r, "backup_s_median"); rs = f(r, "restore_s_median"); v = f(r, "verify_s_median")
    show = lambda x: "" if x is None else f"{x:.2f}"
    mib = lambda k: "" if not r.get(k) else f"{float(r[k])/2**20:.0f}"
    target = "s3" if r["target"].startswith("s3://") else "disk"
    lines.append(f"| {r['compression']} | {r['stripes']} | {target} | {b:.2f} | {float(r['bytes_read'])/b/1e6:.0f} | {show(rs)} | {show(v)} | {float(r['size_bytes_median'])/1e6:.0f} | {mib('backup_peak_rss_bytes_median')} | {mib('restore_peak_rss_bytes_median')} |")
lines += ["", "| pgBackRest | codec | backup s | restore s | repo MB |", "|---|---|---|---|---|"]
keys = []
for r in br:
    if (r["version"], r["codec"]) not in keys:
        keys.append((r["version"], r["codec"]))
for v, c in keys:
    rr = [r for r in br if r["codec"] == c and r["version"] == v]
    lines.append(f"| {v} | {c} | {med(float(r['backup_s']) for r in rr):.2f} | {med(float(r['restore_s']) for r in rr):.2f} | {med(float(r['repo_bytes']) for r in rr)/1e6:.0f} |")
# The ratios, pairwise with each pgBackRest: sheaf's best stripes on S3 per codec.
lines += ["", "| codec | pgBackRest | backup: pgBackRest s / sheaf s | restore: pgBackRest s / sheaf s |", "|---|---|---|---|"]
for v, c in keys:
    mine = [r for r in rows if r["tool"] == "sheaf" and r["compression"] == c and r["target"].startswith("s3://")]
    if not mine:
        continue
    b = min(float(r["backup_s_median"]) for r in mine); rs = min(float(r["restore_s_median"]) for r in mine if r.get("restore_s_median"))
    rr = [r for r in br if r["codec"] == c and r["version"] == v]
    lines.append(f"| {c} | {v} | {med(float(r['backup_s']) for r in rr)/b:.2f}x | {med(float(r['restore_s']) for r in rr)/rs:.2f}x |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
