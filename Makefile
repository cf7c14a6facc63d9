SHELL := /bin/bash
# voxpool: the two set-up commands are `make run` and `make test`; both install what is
# missing first (deploy/local/setup.sh: silent and quick when nothing is).
CARGO ?= cargo

.PHONY: setup build run test bench bench-instructions fmt lint check-deps gpu-server-stop gpu-server-start

## setup: install the Debian packages, grpcurl, the Python packages and s3s-fs that are missing
setup:
	@deploy/local/setup.sh

build:
	$(CARGO) build --workspace --bins

## run: start scheduler (memory store), catalog (SQLite, seeded), synthesis (espeak-ng), jobs
## (its own redis-server), a fake GPU server and a fake ElevenLabs (voice cloning); ports from
## VOXPOOL_PORT_* (deploy/local/ports.sh)
run: setup build
	deploy/local/run.sh

## gpu-server-stop / gpu-server-start: stop, or start again, the running stack's fake GPU server
## (it is stopped with the stack either way)
gpu-server-stop:
	@deploy/local/gpu-server.sh stop
gpu-server-start:
	@deploy/local/gpu-server.sh start

## test: every test of the workspace (starts its own redis-server / PostgreSQL). The binaries
## are built first: end-to-end tests run them (voxpool-fake-vendor has no tests of its own
## that would make `cargo test` build it).
## The last line totals every test binary's result.
test: setup
	$(CARGO) build --workspace --bins
	@set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee target/test-output.log; \
	status=$$?; \
	awk '/^test result:/ { p += $$4; f += $$6; i += $$8 } \
	  END { printf "make test: %d passed, %d failed, %d ignored\n", p, f, i }' target/test-output.log; \
	exit $$status

## bench: every benchmark; writes a dated report under target/bench-reports/, and fails when
## a hot path's instruction count rose more than 5 % over its committed figure
bench: setup
	deploy/local/bench.sh

## bench-instructions: only the instruction-count benchmarks and that check (docs/BENCHMARKS.md)
bench-instructions: setup
	deploy/local/instructions.sh

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
