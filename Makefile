# Two commands do all set-up on a fresh machine (Python 3.11+ with venv):
#   make run    start Dagster (webserver + daemon, sensor on) on ~/.hermes/state.db
#   make test   install the test extras and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 3000

export DAGSTER_HOME ?= $(CURDIR)

.PHONY: run test install install-test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[test,postgres]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(VENV)/bin/dagster dev -w workspace.yaml -p $(PORT)

test: install-test
	$(VENV)/bin/pytest

bench: install-test
	$(VENV)/bin/python bench/run.py

clean:
	rm -rf $(VENV) history storage schedules logs warehouse .logs_queue .nux .telemetry
