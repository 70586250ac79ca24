# Two entry points for newcomers: `make demo` and `make test`. Both create .venv when
# it is missing. torch is pinned first: an unpinned torch (or a package that pulls it)
# would download a multi-GB CUDA build instead of the CPU wheel.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0

.PHONY: demo test test-fast lint install install-test clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[test,trl,server,ray]"
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(PY) -m srpo_agents.demo

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .

test: $(VENV)/.installed-test lint
	$(PY) -m pytest

# The quick loop while developing: everything but the tests marked slow.
test-fast: $(VENV)/.installed-test lint
	$(PY) -m pytest -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
