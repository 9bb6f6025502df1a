#!/usr/bin/env bash
# make fuzz: the stripe, manifest and repository-object readers under libFuzzer (cargo-fuzz,
# nightly), RUNS executions each (default 1000000), from seeds made here: a small backup of every
# frame shape (packed small files, a file of several chunks, a zero chunk), the same encrypted under
# the fuzzing key, its manifest's JSON, and repository objects plain and encrypted. Findings land in
# fuzz/artifacts/TARGET/; each becomes a regression test in crates/core/tests/integration/fuzzed.rs.
# Built without a sanitizer (ISA-L's configure refuses cargo-fuzz's flags); the Rust code is
# bounds-checked, and -rss_limit_mb catches allocations the bytes ask for.
#
#   [RUNS=1000000] [TARGETS="stripe manifest"] scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000} TARGETS=${TARGETS:-stripe blob manifest}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || { echo "make fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2; exit 2; }
S=$PWD/target/release/sheaf
[ -x "$S" ] || cargo build --release --locked
seed=$(mktemp -d); trap 'rm -rf "$seed"' EXIT
mkdir -p "$seed/src/d" fuzz/corpus/stripe fuzz/corpus/manifest fuzz/corpus/blob
for i in 1 2 3 4 5; do printf 'small file %s, packed with the others\n' "$i" >"$seed/src/d/s$i"; done
head -c 150000 /dev/urandom >"$seed/src/big"
head -c 70000 /dev/zero >"$seed/src/zeros"
"$S" --catalog "$seed/catalog.db" backup "$seed/src" --to fuzz/corpus/stripe/seed.sheaf --transfer-size 64KiB --overwrite >/dev/null
# The same, encrypted under the key the targets hold (32 bytes of 0x5e), and repository objects.
printf '\x5e%.0s' $(seq 32) >"$seed/fuzz.key"
"$S" --catalog "$seed/catalog.db" backup "$seed/src" --to fuzz/corpus/stripe/seed-encrypted.sheaf --transfer-size 64KiB --overwrite --encryption-key-file "$seed/fuzz.key" >/dev/null
cargo run --release --locked -q -p sheaf-core --example fuzz_seeds -- fuzz/corpus/blob
# The manifest region, from the trailer's offset and length (little-endian u64s 16..32 of the last 80 bytes).
read -r off len < <(tail -c 80 fuzz/corpus/stripe/seed.sheaf | od -An -tu8 -j16 -N16)
tail -c +$((off + 1)) fuzz/corpus/stripe/seed.sheaf | head -c "$len" | zstd -q -d >fuzz/corpus/manifest/seed.json
cd fuzz
for t in $TARGETS; do
  echo "== $t: $RUNS runs"
  cargo +nightly fuzz run -O -s none "$t" "corpus/$t" -- -runs="$RUNS" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 2>&1 |
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|artifact_prefix|Test unit written)" || true
  n=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
  echo "== $t: $n finding(s) in fuzz/artifacts/$t"
done
