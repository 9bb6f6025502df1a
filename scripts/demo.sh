#!/usr/bin/env bash
# make demo: a throwaway PostgreSQL cluster loaded with TPC-H (scale 0.1; DEMO_SCALE=1 for the
# real thing), backed up with lz4, deflate:1 and zstd low/medium/high to 2 stripes, each restored,
# started and checked against the source.
set -euo pipefail
cd "$(dirname "$0")/.."
exec target/release/sheaf demo --scale "${DEMO_SCALE:-0.1}"
