# kvtune: two commands do all set-up on a fresh Debian machine as root.
#   make demo   installs what is missing, then tunes a local memcached for a few minutes
#   make demo-capacity   the same, for memcached's capacity at a p99 SLO (requests/s)
#   make test   installs what is missing, then runs every test (Rust and Python)
#   make test-unit   only the unit tier of the Python tests (README "Tests")
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
KVLOAD := kvload/target/release/kvload
PY := .venv/bin/python
# Python's compiled files are written (an environment may say not to): each `python -m kvtune`
# a test starts, and pytest's rewritten test modules, are compiled once, not in every process.
unexport PYTHONDONTWRITEBYTECODE
# The unit tier in parallel (pytest-xdist): two workers on this class of host, more on more CPUs.
UNIT_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST := $(PY) -m pytest -q
CARGO_FLAGS := --release --quiet --manifest-path kvload/Cargo.toml
# When make started (make test says how long each of its phases took from there).
STARTED := $(shell date +%s)

.PHONY: setup kvload demo demo-capacity test test-rust test-rust-build test-rust-sim \
        test-rust-servers test-python test-unit test-integration test-e2e test-install \
        test-collect test-installed dist lint lint-python lint-rust bench clean

setup:
	@scripts/setup.sh

kvload: setup
	@cargo build $(CARGO_FLAGS)

demo: kvload
	@rm -f results/memcached-demo.db
	@# exit 1 is an answer, not a failure: the study ran and found no significant improvement
	@$(PY) -m kvtune tune examples/memcached.yaml; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 1 ]

# The operator's question: how many requests/s this memcached carries within a p99 SLO,
# and which flags raise it (examples/memcached-capacity.yaml; README "Capacity at an SLO").
demo-capacity: kvload
	@rm -f results/memcached-capacity.db
	@$(PY) -m kvtune tune examples/memcached-capacity.yaml; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 1 ]

# Every test: the three Python tiers (README "Tests"), the Rust tests, lint, the wheels
# installed the way people install them, and the slowest 15 tests of the Python tiers.
# Lint, the Rust tests' build, kvload's library tests (simulations and parsers: no server,
# no pinned CPU) and the wheels' install measure nothing: they run side by side (mypy and
# pip take one CPU or none while cargo builds); the Rust tests on real servers, which measure
# rates on pinned CPUs, and the Python tiers then run alone.
test: kvload
	@rm -f test-artifacts/junit-*.xml
	@echo "make test: set-up done at $$(( $$(date +%s) - $(STARTED) )) s"
	@$(MAKE) --no-print-directory dist
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint-python lint-rust \
	  test-rust-sim test-installed test-collect
	@echo "make test: wheels, lint, Rust library tests, install done at $$(( $$(date +%s) - $(STARTED) )) s"
	@$(MAKE) --no-print-directory test-rust-servers
	@echo "make test: Rust tests on real servers done at $$(( $$(date +%s) - $(STARTED) )) s"
	@$(MAKE) --no-print-directory test-python
	@echo "make test: Python tests done at $$(( $$(date +%s) - $(STARTED) )) s"
	@$(PY) scripts/slowest.py 15 test-artifacts/junit-*.xml

# The wheels people install: kvload (a platform wheel with the binary, maturin) and kvtune
# (which depends on it), both at the repository's version, into dist/.
dist: setup
	@rm -rf dist && mkdir -p dist
	@.venv/bin/maturin build --release -m kvload/Cargo.toml --out dist 2>&1 | tail -1
	@.venv/bin/pip wheel -q --disable-pip-version-check --no-deps -w dist . 2>&1 | tail -1
	@ls dist

# The installed way, end to end: the wheels into a fresh virtual environment outside the
# checkout, run from another directory with the checkout's kvload out of reach.
test-install: dist
	@scripts/test_install.sh

# The same with the wheels already in dist/ (make test builds them first: cargo's lock on
# kvload/target would hold maturin behind the Rust tests' build).
test-installed:
	@scripts/test_install.sh

# Every Rust test.
test-rust:
	@cargo test $(CARGO_FLAGS)

# The Rust tests built, not run (make test builds them beside lint and test-install).
test-rust-build:
	@cargo test $(CARGO_FLAGS) --no-run

# kvload's library tests (the knee search on simulated curves, the engine's simulator, the
# parsers; nothing started, no CPU pinned) and its doc tests: beside lint in make test.
test-rust-sim: test-rust-build
	@cargo test $(CARGO_FLAGS) --lib
	@# rustdoc warns that it cannot reach make's jobserver under make -j: it runs without
	@MAKEFLAGS= cargo test $(CARGO_FLAGS) --doc

# The rest of the Rust tests: the binary's and the integration tests (tests/*.rs: kvload on
# real memcached and redis-server, its searches on pinned CPUs), alone in make test.
test-rust-servers: test-rust-build
	@cargo test $(CARGO_FLAGS) --bins --test '*'

# The unit tier and the parallel-safe tests of the other tiers (marker `parallel`: measuring
# nothing, changing no host knob) together on the workers, then the rest of the integration
# and e2e tiers one at a time, in one run (one start and one collection, not two: each test
# carries its tier in the JUnit file).
test-python: setup kvload
	@mkdir -p test-artifacts
	@$(PYTEST) -m "unit or parallel" -n $(UNIT_WORKERS) --dist loadgroup \
	  --junitxml=test-artifacts/junit-parallel.xml
	@$(PYTEST) -m "(integration or e2e) and not parallel" \
	  --junitxml=test-artifacts/junit-serial.xml

# Every test collected, nothing run: a module that no longer imports fails here, and the
# modules the test runs import (kvtune, its dependencies, the test modules) are compiled once,
# beside lint, instead of by each of the parallel run's processes at once (a fresh
# environment's collection takes 11.8 s, a compiled one's 3.1 s).
test-collect: setup
	@out=$$($(PYTEST) --collect-only -p no:xdist 2>&1) || { echo "$$out" | tail -40; exit 1; }

# The unit tier: no process, no server binary (tests/conftest.py fails a unit test that
# starts one), in parallel.
test-unit: setup
	@mkdir -p test-artifacts
	@$(PYTEST) -m unit -n $(UNIT_WORKERS) --junitxml=test-artifacts/junit-unit.xml

# Each tier alone (the parallel-safe tests of a tier among its others, one at a time).
# Real servers, kvload, PostgreSQL, sshd: one test at a time (servers and load are pinned).
test-integration: kvload
	@mkdir -p test-artifacts
	@$(PYTEST) -m "integration and not e2e" --junitxml=test-artifacts/junit-integration.xml

# Whole studies, capacity, the fleet, the walk-through: one at a time.
test-e2e: kvload
	@mkdir -p test-artifacts
	@$(PYTEST) -m e2e --junitxml=test-artifacts/junit-e2e.xml

lint: lint-python lint-rust

lint-python: setup
	@.venv/bin/ruff check -q src tests bench scripts
	@out=$$(.venv/bin/mypy src) || { echo "$$out"; exit 1; }

lint-rust: setup
	@cargo fmt --manifest-path kvload/Cargo.toml --check
	@# kvload/target, shared with the release build: clippy's checks reuse its build scripts
	@# and procedural macros (19 -> 13 s of CPU; beside the tests' build in make test, cargo's
	@# lock runs the two one after the other while lint and install use the CPUs).
	@cargo clippy $(CARGO_FLAGS) -- -D warnings

bench: kvload
	@bench/kvload/run.sh
	@$(PY) bench/evaluator/run.py

clean:
	rm -rf .venv results kvload/target test-artifacts dist build
