"""recipes/paper/: the BiCC paper's Table 2 runs as launch files (issue 21 item 4).

Checked on CPU: every file is what recipes/paper/generate.py writes, parses, names only
fields the code reads (TRL files build an RLVRConfig; verl files hold only keys of the
verl recipe this repository tests against verl's schema), covers both models x every base
method x {BiCC, RCC} on both engines, and uses the paper's model, dataset and benchmark
names and evaluation settings.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "recipes" / "paper"
spec = importlib.util.spec_from_file_location("paper_recipes", PAPER / "generate.py")
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)

TRL_FILES = sorted((PAPER / "trl").glob("*.yaml"))
VERL_FILES = sorted((PAPER / "verl").glob("*.yaml"))
# The paper's names (BiCC paper, Table 2 / Table 6; DAPO-Math-17k).
PAPER_MODELS = {"Qwen/Qwen3-4B-Instruct-2507", "microsoft/Phi-4-mini-instruct"}
PAPER_BENCHMARKS = "math500,amc23,aime24,aime25"


def key_paths(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield prefix + (key,)
            yield from key_paths(value, prefix + (key,))


def test_files_are_what_the_generator_writes():
    written = generate.all_recipes()
    on_disk = {p.relative_to(ROOT).as_posix(): p.read_text() for p in TRL_FILES + VERL_FILES}
    assert on_disk == written


def test_every_model_method_and_addition_on_both_engines():
    names = {p.stem for p in TRL_FILES}
    assert names == {p.stem for p in VERL_FILES}
    expected = {
        f"{m}_{a}_{k}"
        for m in ("grpo", "dr_grpo", "dapo", "gmpo", "gspo")
        for a in ("bicc", "rcc")
        for k in ("qwen3-4b", "phi4-mini")
    }
    assert names == expected


@pytest.mark.parametrize("path", TRL_FILES, ids=lambda p: p.stem)
def test_trl_file_builds_the_config_it_names(path):
    from contrastive_rlvr.trainer.parse import parse_config

    raw = yaml.safe_load(path.read_text())
    config = parse_config(path, ["--bf16", "false"])  # bf16 needs a GPU in transformers
    addition = path.stem.rsplit("_", 2)[1]
    assert config.recipe == raw["recipe"] and path.stem.startswith(config.recipe + "_")
    assert config.bicc is (addition == "bicc") and config.rcc is (addition == "rcc")
    assert config.model in PAPER_MODELS and config.dataset == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert config.learning_rate == 1e-6 and config.num_generations == 8
    assert config.max_steps == 3000 and config.warmup_steps == 100
    assert config.lr_scheduler_type == "cosine" and config.weight_decay == 0.01
    assert config.beta == (0.01 if config.recipe == "dr_grpo" else 0.0)
    if config.bicc:
        assert config.bicc_context_ratio == 0.4
    assert config.use_vllm and config.vllm_mode == "colocate"
    # 128 prompts an optimizer step on 8 GPUs, as the verl files.
    assert config.per_device_train_batch_size * config.gradient_accumulation_steps * 8 == 128 * 8
    smoke = parse_config(path, ["--bf16", "false", "--max_steps", "5"])
    assert smoke.max_steps == 5


@pytest.mark.parametrize("path", TRL_FILES + VERL_FILES, ids=lambda p: p.parent.name + "/" + p.stem)
def test_header_has_launch_gpus_estimate_eval_and_smoke(path):
    text = path.read_text()
    assert re.search(r"^# GPUs: \d+", text, re.M)
    assert re.search(r"^# GPU-hours: ~\d+ \(an ESTIMATE, not measured: .*steps x", text, re.M)
    assert "# Launch:" in text and "# Smoke (one GPU, 5 steps):" in text
    evals = [line for line in text.splitlines() if "contrastive-rlvr eval" in line]
    assert len(evals) == 1
    line = evals[0]
    for flag in (f"--benchmarks {PAPER_BENCHMARKS}", "--n 32", "--temperature 0.6",
                 "--top-p 0.95", "--max-new-tokens 4096"):  # fmt: skip
        assert flag in line


@pytest.mark.parametrize("path", VERL_FILES, ids=lambda p: p.stem)
def test_verl_file_names_only_keys_of_the_tested_verl_recipe(path):
    template = yaml.safe_load((ROOT / "recipes" / "verl" / "grpo_bicc_rcc.yaml").read_text())
    raw = yaml.safe_load(path.read_text())
    assert set(key_paths(raw)) <= set(key_paths(template))
    actor = raw["actor_rollout_ref"]["actor"]
    method, addition = path.stem.rsplit("_", 2)[0], path.stem.rsplit("_", 2)[1]
    assert actor["policy_loss"]["loss_mode"] == f"crlvr_{method}"
    assert actor["policy_loss"]["bicc"] is (addition == "bicc")
    assert raw["actor_rollout_ref"]["model"]["path"] in PAPER_MODELS
    assert raw["actor_rollout_ref"]["rollout"]["n"] == 8
    assert actor["optim"]["lr"] == 1e-6
    estimator = raw["algorithm"]["adv_estimator"]
    assert ("rcc" in estimator) is (addition == "rcc")
    if addition == "rcc":
        assert actor["use_kl_loss"]  # verl computes the reference log-probs RCC reads
    assert actor["kl_loss_coef"] == (0.01 if method == "dr_grpo" else 0.0)
    if method == "dapo":
        assert actor["clip_ratio_high"] == 0.28
    # The estimator is one the verl plugin registers (read from its source: importing it
    # needs verl's environment, where tests/scale_out/test_verl_trainer.py checks verl's schema).
    source = (ROOT / "src/contrastive_rlvr/integrations/verl/advantages.py").read_text()
    assert f'EstimatorSpec(PREFIX + "{estimator.removeprefix("crlvr_")}"' in source
    losses = (ROOT / "src/contrastive_rlvr/integrations/verl/losses.py").read_text()
    core = re.search(r"^CORE_LOSSES = \((.*)\)$", losses, re.M).group(1)
    assert f'"{method}"' in core
