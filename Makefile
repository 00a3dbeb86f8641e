# SciCodePile: the README's two commands are `make demo` and `make test`; each does its own set-up.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv sysdeps sandbox-env test test-fast demo bench lint format lock clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==26.3
	$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests need: bubblewrap (sandbox), chromium (UI screenshot), docker-compose
# (compose-file validation).  Installed only when missing.
sysdeps:
	@bash scripts/sysdeps.sh

# The sandbox's own interpreter environment (pinned scientific stack), built once per pin set.
sandbox-env: sysdeps
	@bash scripts/sandbox-env.sh >/dev/null

test: venv sysdeps sandbox-env
	$(PY) -m pytest

test-fast: venv
	$(PY) -m pytest -m "not e2e and not slow"

demo: venv sysdeps sandbox-env
	bash scripts/demo.sh

bench: venv sysdeps sandbox-env
	@for b in bench/*.py; do case $$b in */_*) continue;; esac; $(PY) $$b || exit 1; done

lint: venv
	$(VENV)/bin/ruff check include plugins dags tests bench
	$(VENV)/bin/ruff format --check include plugins dags tests bench

format: venv
	$(VENV)/bin/ruff format include plugins dags tests bench
	$(VENV)/bin/ruff check --fix include plugins dags tests bench

# Re-pin the whole tree after changing requirements.txt.
lock: venv
	$(PY) -m pip freeze --exclude-editable | grep -v '^-e ' > constraints.txt

clean:
	rm -rf var .pytest_cache
