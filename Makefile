# sheaf: the two commands a newcomer needs are `make demo` and `make test`.
CARGO ?= cargo

.PHONY: all deps build deb test lint crash demo bench bench-engine bench-report bench-s3 bench-archive fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --locked

# The Debian package (target/deb/sheaf_VERSION_ARCH.deb): the binary, man pages, completions,
# systemd units, /etc/sheaf/sheaf.toml, logrotate; lintian must report no error. Install it with
# dpkg -i on any Debian 12 or later; the target needs no Rust toolchain.
deb: build
	@scripts/make-deb.sh

# The whole suite: unit tests, the round-trip matrix, the storage conformance suite and the CLI
# fault tests (some mount a small tmpfs or drop privileges, which needs root or user namespaces).
# The PostgreSQL suite runs on each major version in PG_VERSIONS (the first with everything else):
# Debian's 15 and PyPI's 18 by default; SHEAF_PG picks the server (docs/design.md).
PG_VERSIONS ?= 15 18
# Some tests run on the first version only: the peers' bench (Debian's pgBackRest 2.45 refuses
# newer servers, and the wheel's pg_basebackup has neither lz4 nor zstd) and the German-messages
# test (the wheel's server is built without translations; Debian's 15 has postgres-15.mo), and the
# TLS test (the wheel's server is built without SSL), and the pg_upgrade tests (from the first
# version to 18: on 18 itself there is no major to upgrade from).
PEER_SKIP = -- --skip postgres::bench::a_bench_on_a_small_tpch_cluster --skip postgres::german --skip postgres::tls:: --skip postgres::repo::upgrade::
# The scenarios that matter most run on PG_SCENARIO_VERSIONS as well (servers from npm, client
# tools from 18's wheel; scripts/install-deps.sh): an online backup into a repository, PITR to a
# named point, an incremental chain under DDL with --delta, the drills, sheaf's WAL reader against
# the server's own, retention and pins, verify's ledger, TLS, standbys built from the repository. PG_VERSIONS="15 16 17 18" runs the whole suite on each.
PG_SCENARIO_VERSIONS ?= 16 17
SCENARIOS = postgres::online::online_backup_under_pgbench postgres::repo::point_in_time_recovery \
  postgres::incremental::incrementals_and_a_differential postgres::drill:: postgres::walsum:: postgres::keep:: \
  postgres::verify:: postgres::tls:: postgres::replica::standbys_from_the_repository
# It first holds the code to what the workspace's lints and rustfmt.toml promise (as `make lint`).
test: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@scripts/module-cycles.py
	SHEAF_PG=$(firstword $(PG_VERSIONS)) $(CARGO) test --workspace --locked
	@for v in $(wordlist 2,99,$(PG_VERSIONS)); do \
	  echo "== the PostgreSQL suite on PostgreSQL $$v"; \
	  SHEAF_PG=$$v $(CARGO) test --locked -p sheaf --test integration postgres:: $(PEER_SKIP) || exit 1; \
	done
	@for v in $(PG_SCENARIO_VERSIONS); do \
	  echo "== the main PostgreSQL scenarios on PostgreSQL $$v"; \
	  SHEAF_PG=$$v $(CARGO) test --locked -p sheaf --test integration -- $(SCENARIOS) || exit 1; \
	done

# Power cuts (issue 36, docs/durability.md): every workload on the power-loss file system
# (crates/crashfs, FUSE) or against MinIO, CRASH_POINTS cuts each (default 200; make test runs a
# short version of each); CRASH_SEED replays a run. One line per workload in crash-report.txt.
CRASH_POINTS ?= 200
crash: deps
	@rm -f crash-report.txt
	CRASH_POINTS=$(CRASH_POINTS) CRASH_REPORT=$(CURDIR)/crash-report.txt SHEAF_PG=$(firstword $(PG_VERSIONS)) \
	  $(CARGO) test --locked -p sheaf --test integration crash:: -- --nocapture --test-threads 1
	@cat crash-report.txt

# Clippy (with the workspace's lints: undocumented unsafe is an error) and the import-circle check.
lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@scripts/module-cycles.py

# A throwaway PostgreSQL cluster with TPC-H, backed up with each codec, restored, started, checked.
demo: build
	@scripts/demo.sh

# The stripe and manifest readers under libFuzzer, RUNS executions each (default 10^6; nightly
# and cargo-fuzz, installed if missing). Findings go to fuzz/artifacts/ and become tests.
fuzz: build
	@scripts/fuzz.sh

# Codec and checksum throughput on seeded data (criterion).
bench: deps
	$(CARGO) bench -p sheaf-core --bench codecs

# NUL-target throughput on real PostgreSQL pages against the codec ceiling (needs PostgreSQL).
bench-engine: build
	@scripts/bench-engine.sh

# The example report (docs/bench/tpch-sf1/): sheaf bench on TPC-H scale 1, every codec at 1 and 2
# stripes to NUL and to disk, with pg_basebackup and pgBackRest (make deps installs them).
bench-report: build
	target/release/sheaf bench --plan docs/bench/tpch-sf1.toml --out $${OUT:-tpch-sf1-report}

# Object storage (docs/bench/s3-sf1/): sheaf to a local MinIO over HTTPS against local disk, the
# upload ceiling (mc cp) and pgBackRest's S3 repository, on TPC-H scale 1.
bench-s3: build
	OUT=$${OUT:-s3-report} scripts/bench-s3.sh

# WAL archiving and recovery against cp and pgBackRest (issue 9): OUT/archive.csv.
bench-archive: build
	OUT=$${OUT:-archive-report} scripts/bench-archive.sh

clean:
	$(CARGO) clean
