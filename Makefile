# voxpool: the two set-up commands are `make run` and `make test`.
CARGO ?= cargo

.PHONY: build run test bench fmt lint check-deps

build:
	$(CARGO) build --workspace --bins

## run: start scheduler (memory store), catalog (SQLite, seeded) and synthesis (espeak-ng)
run: build
	deploy/local/run.sh

## test: every test of the workspace (starts its own redis-server / PostgreSQL). The binaries
## are built first: end-to-end tests run them (voxpool-fake-vendor has no tests of its own
## that would make `cargo test` build it).
test:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast

## bench: every benchmark; writes a dated report under target/bench-reports/
bench:
	deploy/local/bench.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## check-deps: exactly one version of tonic and of prost in the lock file
check-deps:
	@for c in tonic prost; do \
	  n=$$(grep -A1 "^name = \"$$c\"$$" Cargo.lock | grep -c '^version'); \
	  echo "$$c: $$n version(s)"; [ "$$n" = 1 ] || exit 1; \
	done
