# The two set-up commands of the README. Both are idempotent and work on a fresh clone.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-slow lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs the diagnostics only (no torch) and runs the main command on the sample log.
demo: $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/dflash-diag converge sample_logs/train.jsonl

# Installs everything the tests need and runs the whole suite. torch is pinned to the CPU build
# that this kind of machine has on disk; a plain `torch` would pull a multi-GB CUDA build.
test: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[train,dev]'
	$(BIN)/python -m pytest

test-slow: $(BIN)/python
	$(BIN)/python -m pytest -m slow

lint:
	$(BIN)/ruff check dflash_diag dflash pipelines tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
