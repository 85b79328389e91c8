# Two commands from a fresh clone: `make run` (the main job) and `make test` (the tests).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test stack-down clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("timerbench needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The main job on the embedded defaults.
run: install
	$(BIN)/bench env up
	$(BIN)/bench compare --workload production
	@echo "results: runs/ (the report path is printed above)"

# The tests: unit, conformance (every scheduler, real Postgres and Temporal), end to end.
test: install
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

stack-down:
	-$(BIN)/bench env down

clean: stack-down
	rm -rf $(VENV) .bench runs
