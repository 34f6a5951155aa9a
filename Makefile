# Cairn's two commands: `make run` and `make test`. Both install missing system packages
# first (scripts/setup.sh). Everything builds in release mode, so RocksDB's C++ compiles once
# and is shared by the server, the tests and clippy.

CARGO ?= cargo
# Build the whole workspace every time: building one package alone resolves features
# differently and would rebuild dependencies.
CARGO_BUILD = $(CARGO) build --release --workspace
TARGET_DIR = $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

.PHONY: run test setup fmt lint bench

## Build and run the standalone server on its embedded default (data in ./data, 127.0.0.1:6333).
run: setup
	$(CARGO_BUILD) --bins
	$(TARGET_DIR)/release/cairn serve

## Everything CI checks: formatting, clippy (all targets, warnings are errors), every test.
test: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	$(CARGO) test --release --workspace

setup:
	@scripts/setup.sh

fmt:
	$(CARGO) fmt --all

## Benchmarks one at a time (see BENCHMARKS.md for what each measures).
bench: setup
	$(CARGO) bench --workspace
