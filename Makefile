SHELL := /bin/bash
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
## The last line totals every test binary's result.
test:
	$(CARGO) build --workspace --bins
	@set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee target/test-output.log; \
	status=$$?; \
	awk '/^test result:/ { p += $$4; f += $$6; i += $$8 } \
	  END { printf "make test: %d passed, %d failed, %d ignored\n", p, f, i }' target/test-output.log; \
	exit $$status

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
