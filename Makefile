# Two commands do all set-up on a fresh machine (Python 3.11+ with venv):
#   make run    check the settings, then start Dagster (`dg dev`: webserver + daemon, sensor on)
#               on ~/.hermes/state.db, UI on port 3000 (`make run PORT=3001`: another);
#               Ctrl-C or `make stop` stops it
#   make test   install the test extras and run the test suite
#   make check  the maintainer's checks in under a minute: lint, format, types, the fast tests
# and one queries what they wrote:
#   make query  install DuckDB and open its shell where warehouse/ is (docs/querying.md: recipes)
# `make clean` removes the venv, Dagster's records of runs and sensors in this folder, and
# the captured datasets (warehouse/); it never touches Hermes's own files.
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 3000
# Every install is exactly uv.lock (`uv lock` after a change of pyproject.toml's ranges): what runs is
# what the suite ran on. uv itself comes from PyPI into the venv, pinned here. The packages are
# compiled to bytecode as they are installed (uv does not by default): every later process loads
# them, even where PYTHONDONTWRITEBYTECODE is set (a process compiling Dagster, pandas and pyarrow
# again from source spends ~3 s of CPU before its first line: each `dg` command, each test's subprocess).
UV_VERSION := 0.13.9
SYNC = UV_PROJECT_ENVIRONMENT="$(abspath $(VENV))" $(VENV)/bin/uv sync --frozen --inexact --quiet --compile-bytecode

export DAGSTER_HOME ?= $(CURDIR)

.PHONY: check lint types run stop test query install install-test install-query bench clean

$(VENV)/.installed: pyproject.toml uv.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet "uv==$(UV_VERSION)"
	$(SYNC)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(SYNC) --extra test --extra postgres --extra query
	touch $@ $(VENV)/.installed-query

$(VENV)/.installed-query: $(VENV)/.installed
	$(SYNC) --extra query
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
install-query: $(VENV)/.installed-query

# Checked before Dagster starts: the settings, no Dagster already running for this
# DAGSTER_HOME, the port free. A problem stops make with that one line (exit 2); the
# check's events (a warning of the settings) are printed by Dagster's own load, once.
# hermes_assets.dev then becomes `dg dev`, stoppable by Ctrl-C or `make stop`
# (which returns when its webserver, daemon and code server have all exited).
run: install
	$(eval REFUSED := $(shell $(VENV)/bin/python -m hermes_assets.dev --check --port $(PORT) 2>/dev/null))
	$(if $(REFUSED),$(error $(REFUSED)))
	@$(VENV)/bin/python -m hermes_assets.dev --port $(PORT)

stop:
	@$(VENV)/bin/python -m hermes_assets.dev --stop

# uv.lock in step with pyproject.toml; ruff: lint and format check; mypy: the types of hermes_assets/ (both configured in pyproject.toml).
# .ci/run runs both before the tests.
lint: install-test
	$(VENV)/bin/uv lock --check --quiet
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: install-test
	$(VENV)/bin/mypy

# Lint, types and the fast tests: every test not marked `slow` (one that starts a process or
# runs a Dagster job; tests/support/fast_lane.py). `make test` runs them all.
check: lint types
	$(VENV)/bin/pytest -q -n auto -m "not slow"

test: install-test
	$(VENV)/bin/pytest

# DuckDB's shell in $(DAGSTER_HOME), where the default warehouse/ is: the recipes (README, docs/querying.md) run as pasted
query: install-query
	@echo "DuckDB in $(DAGSTER_HOME): paste a recipe from docs/querying.md; .quit to leave"
	@cd "$(DAGSTER_HOME)" && "$(abspath $(VENV))/bin/duckdb"

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(SYNC) --extra test --extra postgres --extra query --extra bench
	touch $@

# the side-by-side speed table on the medium store (BENCH_ARGS='--store large' for the 1M-message one)
bench: $(VENV)/.installed-bench
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) history storage schedules logs warehouse .logs_queue .nux .telemetry .hermes_assets-dev.pid redaction.key
