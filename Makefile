# sheaf: the two commands a newcomer needs are `make demo` and `make test`.
CARGO ?= cargo

.PHONY: all deps build test demo bench-engine clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --locked

# The whole suite: unit tests, the round-trip matrix, the storage conformance suite and the CLI
# fault tests (some mount a small tmpfs or drop privileges, which needs root or user namespaces).
test: deps
	$(CARGO) test --workspace --locked

# Back up a generated data set to two stripes, verify it, restore it and compare.
demo: build
	@scripts/demo.sh

# NUL-target throughput on real PostgreSQL pages against the codec ceiling (needs PostgreSQL).
bench-engine: build
	@scripts/bench-engine.sh

clean:
	$(CARGO) clean
