# Two commands from a fresh clone: `make run` (the main job) and `make test` (the tests);
# `make test-fast` is the tier without servers, for every change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run lint test test-fast stack-down clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("timerbench needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The main job on the embedded defaults: a steady-state comparison of the Composio article's two
# designs and pg_leased at its 556 fires/s (named, so a newly registered backend does not lengthen
# it: compare one with `bench compare --schedulers ...`). production-compressed is the production shape 4x faster
# (15-30 s intervals, ~12,000 triggers, 30 s warm-up, 90 s window: ~4 cycles per trigger); the
# full shape is `bench compare --workload production` (2 min warm-up + 10 min window per backend,
# ~40 min for three).
# Every design with a choice writes the poll state under one policy (`bench compare --state-writes`,
# skip-unchanged by default), so the recommendation's cost ratios are like for like.
# The stack stays up for the next command (said at the end, whether the comparison succeeded or
# not); `make stack-down` or `.venv/bin/bench env down` stops it.
run: install
	$(BIN)/bench env up
	@$(BIN)/bench compare --schedulers pg_queue,temporal_shards,pg_leased --workload production-compressed \
		-o runs/report.html; status=$$?; \
	if [ $$status -eq 0 ]; then echo "results: runs/report.html (open it in a browser) and one run directory per scheduler under runs/"; fi; \
	echo "the embedded Postgres and Temporal are still running for the next command; stop them with: $(BIN)/bench env down"; \
	exit $$status

# The npm packages of the owntable tests' node applications (pg-boss, graphile-worker), at the
# lock file's versions, with npm's cache inside the directory (both gitignored); the stamp holds
# the lock file it installed (tests/owntable/libraries.py checks the same, for a bare pytest).
NODE_APPS := tests/owntable/node
$(NODE_APPS)/node_modules/.installed-lock: $(NODE_APPS)/package-lock.json
	cd $(NODE_APPS) && npm ci --cache .npm-cache --prefer-offline --no-audit --no-fund --loglevel=error
	cp $(NODE_APPS)/package-lock.json $@

# ruff (config in pyproject.toml): the lint rules, and the tree as `ruff format` writes it.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The tests: ruff first, then unit, conformance (every scheduler, real Postgres and Temporal),
# end to end. The session stops the embedded servers it started; ones already running stay up.
# Four pytest-xdist workers, a test file per worker at a time (the conformance suite a
# scheduler per worker at a time: tests/conftest.py groups them): most tests wait on timers and
# runs, not on the CPU (three kept 2 cores at a load near 2 and took 14.5 minutes).
test: lint $(NODE_APPS)/node_modules/.installed-lock
	$(BIN)/python -m pytest -q -p no:cacheprovider -rfE --durations=15 -n 4 --dist loadgroup tests

# The fast tier: ruff, the unit tests and the layer contracts (tests/unit/test_layers.py), no
# servers (tests/unit/conftest.py refuses them); about 30 s on 2 shared cores.
test-fast: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -rfE -n 2 tests/unit

stack-down:
	-$(BIN)/bench env down

clean: stack-down
	rm -rf $(VENV) .bench runs

# Open a report in headless Chromium (installs Debian's chromium if missing), save a PNG and fail
# on console errors. REPORT=path.html picks a report; by default runs/report.html is rebuilt
# from runs/ (or from a short memory smoke run when runs/ is empty). SHOT=path.png for the PNG.
.PHONY: report-screenshot
report-screenshot:
	@test -x $(BIN)/bench || $(MAKE) install
	scripts/report_screenshot.sh $(REPORT) $(SHOT)
