# Two commands do all set-up on a fresh machine with Python 3.11:
#   make demo   - create .venv, install Tether, run the demo on the embedded default
#   make test   - create .venv, install Tether with dev tools, run the test suite
PYTHON ?= python3
# bash: the test target reads pytest's exit code through a pipe (PIPESTATUS)
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Python caches bytecode here even where the machine sets PYTHONDONTWRITEBYTECODE (an empty value
# is unset): otherwise every test process compiles the tests again as pytest collects them (18 s
# of CPU each, against 4.5 s), and so does every worker and CLI process a test starts.
export PYTHONDONTWRITEBYTECODE :=
# The dev install maps the folders shared/, producer/, worker/ onto the one import root `tether`
# with a tree of links (setuptools' strict editable mode: mypy and subprocesses see it too). A
# link tree does not notice new modules (or Lua scripts), so the install is redone when their list changes.
MODULES := $(VENV)/.modules
MODULE_LIST := $(shell find shared producer worker \( -name '*.py' -o -name '*.lua' \) 2>/dev/null | sort | md5sum)
$(shell mkdir -p $(VENV); [ "$$(cat $(MODULES) 2>/dev/null)" = "$(MODULE_LIST)" ] || echo "$(MODULE_LIST)" > $(MODULES))

.PHONY: demo test test-long test-stress lint typecheck docs bench clean

$(STAMP): pyproject.toml $(MODULES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	rm -rf build/__editable__.*
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded,bench,agents,docs,mcp]' --config-settings editable_mode=strict
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo

# Three pytest processes (pytest-xdist), a test file each at a time: the tests wait on workers,
# subprocesses and servers about half the time, so one process leaves the 2 cores half idle
# (1,798 tests: 6:31 with two processes, 5:48 with three, 6:00 with four on this 2-core machine).
# Each process starts the session-wide services it needs (stack, chaos stack, cluster) once.
# tests/support/schedule.py hands out the longest files first (xdist ordered them by number of
# tests, so the few-test worker files ran last, one process alone): ~3,000 tests, 421-443 s quiet
# before it; 2,932 tests in 721 s with it and the long variants moved, on a machine other test
# runs kept at load 8-13 (the three processes ended within 4 s of each other; before these
# changes the suite took 1,411 s at load 10-13, its processes ending 48 s apart). Quiet machine,
# with the 100-run fleet recovery test added: 3,004 tests in 467 s; 3,013 tests in 532 s on
# 2026-12-08 (another VM of the same size: machines vary by this much). Later that day, on a
# machine other runs kept at load 6-8: 3,013 tests in 901 s, then 3,015 in 656 s with the CLI
# suite run mostly in-process, one Redis and worker for the tenant-forgery module, the 100-run
# fleet recovery in test-long (a few runs of each kind stay), and the chaos and streaming
# stacks started by one process instead of three (~100 s of the suite's ~800 s of CPU); the
# same code by .ci/run on fresh clones, quiet machine: 3,015 tests in 433 s and 486 s (464-480 s before).
PARALLEL := -n 3 --dist loadfile

# It ends by printing what it measured here: the README quotes this line, not another machine's.
test: $(STAMP)
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -q -m "not slow and not docs" $(PARALLEL) | tee .pytest-summary.log; \
	rc=$${PIPESTATUS[0]}; \
	summary=$$(tail -n 1 .pytest-summary.log | tr -d '=' | sed 's/^ *//;s/ in [0-9.]*s.*//'); rm -f .pytest-summary.log; \
	echo "make test: $$summary in $$(( $$(date +%s) - start )) s on $$(nproc) cores (goal: under 300 s on 2)"; \
	exit $$rc

test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The suite of `make test` with two CPU hogs beside it (stress-ng --cpu 2, else two Python busy
# loops): a loaded machine, where tight timeouts, races and fixed sleeps show. The hogs are
# stopped when the suite ends, passes or fails or is interrupted.
test-stress: $(STAMP)
	@hogs=""; trap 'kill $$hogs 2>/dev/null; wait $$hogs 2>/dev/null' EXIT INT TERM; \
	if command -v stress-ng >/dev/null 2>&1; then \
		stress-ng --cpu 2 --quiet & hogs="$$hogs $$!"; \
	else \
		for n in 1 2; do $(BIN)/python -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	fi; \
	echo "test-stress: CPU hogs (pids$$hogs) beside the suite"; \
	$(BIN)/python -m pytest -q -m "not slow and not docs" $(PARALLEL)

lint: $(STAMP)
	$(BIN)/ruff check shared producer worker tests $(wildcard bench examples)
	$(BIN)/ruff format --check shared producer worker tests $(wildcard bench examples)
	$(BIN)/mypy
	$(BIN)/lint-imports

typecheck: lint

# The API reference and guides into build/site; warnings are errors (as in CI). The build is the
# test tests/test_docs_build.py (it also checks that the API pages hold what they should), which
# `make test` leaves out: CI runs `make docs` and `make test`, so the site is built once.
docs: $(STAMP)
	TETHER_DOCS_SITE_DIR=build/site $(BIN)/python -m pytest -q -p no:xdist -m docs tests/test_docs_build.py

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build .tether .pytest_cache .mypy_cache .ruff_cache
