# Two commands do all set-up on a fresh machine (Python 3.11+ with venv):
#   make run    start Dagster (webserver + daemon, sensor on) on ~/.hermes/state.db
#   make test   install the test extras and run the test suite
# and one queries what they wrote:
#   make query  install DuckDB and open its shell where warehouse/ is (README's recipes)
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 3000

export DAGSTER_HOME ?= $(CURDIR)

.PHONY: run test query install install-test install-query bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[test,postgres,query]'
	touch $@ $(VENV)/.installed-query

$(VENV)/.installed-query: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[query]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
install-query: $(VENV)/.installed-query

run: install
	$(VENV)/bin/dagster dev -w workspace.yaml -p $(PORT)

test: install-test
	$(VENV)/bin/pytest

# DuckDB's shell in $(DAGSTER_HOME), where the default warehouse/ is: the README's recipes run as pasted
query: install-query
	@echo "DuckDB in $(DAGSTER_HOME): paste a recipe from README.md; .quit to leave"
	@cd "$(DAGSTER_HOME)" && "$(abspath $(VENV))/bin/duckdb"

bench: install-test
	$(VENV)/bin/python bench/run.py

clean:
	rm -rf $(VENV) history storage schedules logs warehouse .logs_queue .nux .telemetry
