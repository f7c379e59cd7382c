# The two commands: `make report` (set up, measure if needed, build site/) and
# `make test` (set up, run the suite). Everything else is a step of those.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# EXPERIMENT=name narrows measuring to one experiment (default: every experiment a post names)
EXPERIMENT ?=
MEASURE ?= 0

.PHONY: setup browser openblas data test report clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian's Chromium for the browser test; installed only when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); }

# Debian's OpenBLAS: measurements re-run themselves under it (runner/blas.py); MLX's
# Linux wheel otherwise uses a reference BLAS. Installed only when missing.
openblas:
	@test -e /usr/lib/$$(uname -m)-linux-gnu/libopenblas.so.0 || { \
	  echo "installing Debian's OpenBLAS for measurements"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null) \
	  || echo "OpenBLAS not installed: measurements use MLX's reference BLAS (recorded per run)"; }

# The committed measurement folders (reports/data/measurements/) loaded into the DuckDB
# file the pages read (reports/data/runs.duckdb, not committed); rebuilt only when the
# folders changed.
data: setup
	$(PY) -m runner.report --load-only

# The formatter and the linter first (pyproject.toml's [tool.ruff]): drift fails the suite.
# The suite runs on every core (pytest-xdist), a test file to a worker so that module
# fixtures are built once; the tests that read the repository's own database share one
# file (test_flagship.py). Nothing is skipped. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= auto
test: setup browser data
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

report: setup openblas
	$(PY) -m runner.report --measure $(MEASURE)$(if $(EXPERIMENT), --experiment $(EXPERIMENT))

clean:
	rm -rf site .pytest_cache .hypothesis
