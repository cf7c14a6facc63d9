# voxpool: the two set-up commands are `make run` and `make test`.
CARGO ?= cargo

.PHONY: build run test bench fmt lint check-deps

build:
	$(CARGO) build --workspace --bins

## run: start scheduler (memory store), catalog (SQLite, seeded) and synthesis (espeak-ng)
run: build
	deploy/local/run.sh

## test: every test of the workspace (starts its own redis-server / PostgreSQL)
test:
	$(CARGO) test --workspace --no-fail-fast

## bench: every benchmark; writes a dated report under target/bench-reports/
bench:
	deploy/local/bench.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## check-deps: exactly one tonic and one prost in the lock file
check-deps:
	@! $(CARGO) tree -d --workspace -e normal,build 2>/dev/null | grep -E '^(tonic|prost) v'
