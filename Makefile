# Two commands do all set-up on a fresh machine with Python 3.11:
#   make demo   - create .venv, install Tether, run the demo on the embedded default
#   make test   - create .venv, install Tether with dev tools, run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-long lint typecheck bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded,bench]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check shared producer worker tests $(wildcard bench examples)
	$(BIN)/mypy

typecheck: lint

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .tether .pytest_cache .mypy_cache .ruff_cache
