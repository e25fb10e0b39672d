"""`train` on a user's model directory and jsonl dataset, with a reward given by file path."""

from __future__ import annotations

import json

import pytest
import torch
from trainer_utils import save_tiny_model

from contrastive_rlvr.run import train
from contrastive_rlvr.trainer.parse import parse_config

REWARD = """
def last_char_is_digit(prompts, completions, answer, **kwargs):
    return [float(c.strip()[-1:].isdigit()) for c in completions]
"""


def test_custom_model_dataset_and_reward(tmp_path):
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "model")
    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(
            json.dumps({"problem": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
            for a in range(6)
            for b in range(4)
        )
    )
    reward = tmp_path / "my_reward.py"
    reward.write_text(REWARD)
    config = parse_config(
        None,
        [
            "--model",
            str(model_dir),
            "--dataset",
            str(data),
            "--output_dir",
            str(tmp_path / "out"),
            "--rewards",
            f"{reward}:last_char_is_digit",
            "--heldout_size",
            "4",
            "--eval_n",
            "1",
            "--max_steps",
            "2",
            "--num_generations",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--max_completion_length",
            "8",
            "--bicc",
            "true",
            "--rcc",
            "true",
        ],
    )
    summary = train(config, progress=False)
    assert summary["steps"] == 2
    assert 0.0 <= summary["heldout_avg@n_before"] <= 1.0
    lines = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and "rcc/cov" in json.loads(lines[0])


def test_custom_model_needs_a_dataset(tmp_path):
    config = parse_config(None, ["--model", "some/model", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="dataset"):  # before any model loads
        train(config, progress=False)


def test_bad_rows_stop_with_file_line_and_field(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"problem": "1+1=", "answer": "2"}\n{"problem": "2+2="}\n')
    config = parse_config(
        None,
        [
            "--model",
            str(save_tiny_model(tmp_path / "model")),
            "--dataset",
            str(data),
            "--output_dir",
            str(tmp_path / "out"),
            "--heldout_size",
            "1",
        ],
    )
    with pytest.raises(ValueError, match=r"bad.jsonl.*2.*answer"):
        train(config, progress=False)


def test_math_verify_run_logs_the_verifier_counters_every_step(tmp_path):
    from contrastive_rlvr.rewards import COUNTER_KEYS

    torch.set_num_threads(1)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+1=", "answer": str(a + 1)}) + "\n"
                            for a in range(10)))  # fmt: skip
    config = parse_config(None, [
        "--model", str(save_tiny_model(tmp_path / "model")), "--dataset", str(data),
        "--output_dir", str(tmp_path / "out"), "--rewards", "math_verify",
        "--heldout_size", "2", "--eval_n", "1", "--max_steps", "2", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--bicc", "false", "--rcc", "false", "--diagnostics_every", "0",
        "--deltas_every", "0", "--save_strategy", "no",
    ])  # fmt: skip
    assert train(config, progress=False)["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:  # every key, every step; a healthy verifier: all zero
        assert {k: row.get(k) for k in COUNTER_KEYS} == dict.fromkeys(COUNTER_KEYS, 0.0)
