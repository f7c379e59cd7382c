# The two commands: `make report` (set up, measure if needed, build site/) and
# `make test` (set up, run the suite). Everything else is a step of those.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXPERIMENT ?= spec-decode-batching
MEASURE ?= 0

.PHONY: setup browser test report clean

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

test: setup browser
	$(PY) -m pytest

report: setup
	$(PY) -m runner.report --experiment $(EXPERIMENT) --measure $(MEASURE)

clean:
	rm -rf site .pytest_cache .hypothesis
