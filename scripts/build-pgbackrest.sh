#!/usr/bin/env bash
# Build the newest pgBackRest (the peer to beat: 2.60 development, with object-store read prefetch)
# from the source in ../shared/peers/ with meson, as its README says, into PREFIX (default
# /opt/sheaf/pgbackrest-VERSION, or ~/.cache/sheaf/... when not root). Debian's build
# dependencies are installed first. Prints the binary's path last. A peer only: measured beside
# sheaf (scripts/bench-s3.sh, sheaf bench --peers pgbackrest=PATH), never part of it.
#
#   scripts/build-pgbackrest.sh [TARBALL]
set -euo pipefail
cd "$(dirname "$0")/.."
tarball=${1:-../shared/peers/pgbackrest-2.60dev.tar.gz}
[ -f "$tarball" ] || { echo "build-pgbackrest: no $tarball (give the source tarball's path)" >&2; exit 2; }
name=$(basename "$tarball" .tar.gz)
if [ "$(id -u)" -eq 0 ]; then prefix=${PREFIX:-/opt/sheaf/$name}; else prefix=${PREFIX:-$HOME/.cache/sheaf/$name}; fi
bin="$prefix/bin/pgbackrest"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
need=()
for p in meson ninja-build pkg-config libssl-dev libxml2-dev libpq-dev libyaml-dev libzstd-dev liblz4-dev libbz2-dev libssh2-1-dev zlib1g-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "build-pgbackrest: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
src=$(mktemp -d "${TMPDIR:-/var/tmp}/pgbackrest-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
tar xzf "$tarball" -C "$src"
dir=$(find "$src" -mindepth 1 -maxdepth 1 -type d | head -1)
(cd "$dir" && meson setup build --buildtype=release >&2 && ninja -C build >&2)
install -d "$prefix/bin"
install -m 0755 "$dir/build/src/pgbackrest" "$bin"
"$bin" version >&2
echo "$bin"
