"""Launch recipes (recipes/), the scale-out docs' commands, and the verl data/reward adapters.

Runs in the main environment; the verl configs are checked against verl's own
schema in tests/scale_out/test_verl_trainer.py (the verl environment).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
DOC = ROOT / "docs" / "scale-out.md"
RECIPE_FILES = sorted(p for p in RECIPES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def test_there_are_recipes_for_both_engines():
    names = {p.relative_to(RECIPES).as_posix() for p in RECIPE_FILES}
    assert {
        "verl/grpo_bicc_rcc.yaml",
        "trl/grpo_bicc_rcc.yaml",
        "trl/accelerate/zero2.yaml",
        "trl/accelerate/zero3.yaml",
        "trl/accelerate/multinode_zero3.yaml",
    } <= names


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_every_recipe_file_parses_to_a_mapping(path):
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    assert isinstance(data, dict) and data


@pytest.mark.parametrize("path", sorted((RECIPES / "trl").glob("*.yaml")), ids=lambda p: p.name)
def test_trl_recipe_builds_an_rlvr_config(path):
    from contrastive_rlvr.trainer.parse import parse_config

    # bf16 is refused without a GPU by transformers; everything else is validated as is
    config = parse_config(path, ["--bf16", "false"])
    raw = yaml.safe_load(path.read_text())
    assert config.recipe == raw["recipe"] and config.use_vllm is True
    assert config.bicc is raw.get("bicc", False) and config.rcc is raw.get("rcc", False)
    server = parse_config(path, ["--bf16", "false", "--vllm_mode", "server"])
    assert server.vllm_mode == "server"


@pytest.mark.parametrize(
    "path", sorted((RECIPES / "trl" / "accelerate").glob("*.yaml")), ids=lambda p: p.name
)
def test_accelerate_config_is_valid_deepspeed(path):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(path))  # unknown keys raise
    assert config.distributed_type == "DEEPSPEED"
    assert config.deepspeed_config["zero_stage"] in (2, 3)
    assert config.num_processes == 8 * config.num_machines
    assert config.mixed_precision == "bf16"


@pytest.mark.parametrize("path", sorted((RECIPES / "verl").glob("*.yaml")), ids=lambda p: p.name)
def test_verl_recipe_uses_registered_names(path):
    cfg = yaml.safe_load(path.read_text())
    assert cfg["defaults"] == ["ppo_trainer", "_self_"]
    assert cfg["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]
    actor = cfg["actor_rollout_ref"]["actor"]
    policy_loss = actor["policy_loss"]
    assert policy_loss["_target_"] == (
        "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
    )
    losses = {f"crlvr_{n}" for n in ("grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "gmpo")}
    assert policy_loss["loss_mode"] in losses | {"crlvr_conspo"}
    assert cfg["algorithm"]["adv_estimator"].startswith("crlvr_")
    assert cfg["trainer"]["v1"]["trainer_mode"] == "crlvr_sync"
    assert cfg["actor_rollout_ref"]["rollout"]["name"] == "vllm"
    if cfg["algorithm"]["adv_estimator"].endswith("rcc"):
        assert actor["use_kl_loss"] is True  # verl computes reference log-probs only then
    reward = cfg["reward"]["custom_reward_function"]
    module = reward["path"].removeprefix("pkg://")
    assert (
        module == "contrastive_rlvr.integrations.verl.reward" and reward["name"] == "compute_score"
    )


def test_launch_script_is_valid_bash():
    result = subprocess.run(
        ["bash", "-n", str(RECIPES / "verl" / "launch_multinode.sh")], capture_output=True
    )
    assert result.returncode == 0, result.stderr


def test_docs_commands_name_existing_files_and_configs():
    text = DOC.read_text()
    paths = set(re.findall(r"(recipes/[\w./-]+\.(?:ya?ml|sh|json))", text))
    assert len(paths) >= 6
    for rel in paths:
        assert (ROOT / rel).exists(), rel
    for name in re.findall(r"--config-name=(\w+)", text):
        assert (RECIPES / "verl" / f"{name}.yaml").exists(), name
    assert "-m contrastive_rlvr.cli train --config" in text


def test_cli_runs_as_a_module_for_accelerate_launch():
    result = subprocess.run(
        [sys.executable, "-m", "contrastive_rlvr.cli", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "--config" in result.stdout


def test_verl_parquet_rows_from_prompt_files(tmp_path):
    from datasets import Dataset

    from contrastive_rlvr.integrations.verl.data import write_verl_parquet

    text = tmp_path / "text.jsonl"
    text.write_text(
        '{"problem": "What is 2+2?", "answer": "4"}\n{"question": "3*5?", "answer": 15}\n'
    )
    out = tmp_path / "verl" / "train.parquet"
    assert write_verl_parquet(str(text), out) == 2
    rows = Dataset.from_parquet(str(out)).to_list()
    # a text prompt becomes one user message; the answer is verl's ground truth
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "4"}
    assert rows[1]["reward_model"]["ground_truth"] == "15"
    assert {r["data_source"] for r in rows} == {"contrastive_rlvr"}
    assert [r["extra_info"]["id"] for r in rows] == ["0", "1"]
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"prompt": [{"role": "user", "content": "3*5?"}], "answer": "15"}\n')
    write_verl_parquet(str(chat), out, data_source="mine")
    (row,) = Dataset.from_parquet(str(out)).to_list()
    assert row["prompt"] == [{"role": "user", "content": "3*5?"}] and row["data_source"] == "mine"


def test_verl_reward_adapter_scores_with_math_verify():
    pytest.importorskip("math_verify")
    from contrastive_rlvr.integrations.verl.reward import compute_score

    assert compute_score("contrastive_rlvr", "so the sum is \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert compute_score("contrastive_rlvr", "<answer>7</answer>", "8", extra_info={}) == 0.0
    assert compute_score("contrastive_rlvr", "no answer here", "8") == 0.0
