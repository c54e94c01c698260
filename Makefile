# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make up    install everything into .venv, then run the embedded stack in the foreground
#   make test  install everything into .venv, then run the whole test suite

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.forge-installed
PACKAGES := trainers/sdk libs/common services/api services/scheduler services/log-relay services/registrar trainers/builtin
SOURCES := $(foreach p,$(PACKAGES) libs/cli,$(p)/pyproject.toml) requirements-dev.txt

.PHONY: install browser up test test-fast lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python $(SOURCES)
	# the one torch that installs from local wheels here and has a matching torchvision
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet $(foreach p,$(PACKAGES),-e $(p)) -e 'services/log-relay[mlflow]' -e 'libs/cli[stack]' -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# Browser tests drive Debian's Chromium (Playwright's own browser download does not work here).
# Installed when missing and possible (root with apt-get); otherwise those tests skip, saying why.
browser:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "could not install chromium: the browser tests will skip"; \
	fi

up: install
	$(BIN)/forge stack up

test: install browser
	$(BIN)/pytest -q -ra

test-fast: install
	$(BIN)/pytest -q -ra -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .forge
