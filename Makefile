# Two commands do all set-up on a fresh machine:  make demo   and   make test
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO ?= demo

.PHONY: demo test test-fast install system-deps clean

$(STAMP): pyproject.toml setup.py
	@bash scripts/system_deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

install: $(STAMP)

# Synthetic recording -> every pipeline stage -> outputs in $(DEMO)/run.
# The cartpole, clean depth (realistic sensor noise also runs through on most seeds, more
# slowly and less accurately: see README, "Status").
demo: $(STAMP)
	$(BIN)/vid2sim synth cartpole --out $(DEMO)/cartpole --frames 90 --size 320x240 --noise none --overwrite
	$(BIN)/vid2sim run $(DEMO)/cartpole --out $(DEMO)/run

# Test processes (pytest-xdist), each given whole test files: a test runs on one core (most
# modules pin torch to one thread), so two processes use a two-core machine.
TEST_WORKERS ?= 2

# The whole suite (end-to-end runs, CLI subprocesses, torch.compile, Ray included).
test: $(STAMP)
	@bash scripts/test_deps.sh
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

# Everything but the tests marked slow: a few minutes, for the edit-test loop.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

clean:
	rm -rf $(DEMO) .pytest_cache
