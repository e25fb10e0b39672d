"""A small file trains as the README's command-line quick start says: the default
``heldout_size`` (100) holds out what the file allows (a fifth of its prompts, fewer where
one generation batch needs the rest) and says so in one line; ``--heldout_size 0``
turns the held-out scoring off; the held-out scoring shows its progress."""

from __future__ import annotations

import json
import logging

import pytest
from cli_utils import cli, one_line
from trainer_utils import forbid_model_loading, save_tiny_model

from contrastive_rlvr.data.heldout import fitted_heldout_size


@pytest.mark.parametrize(
    ("problems", "needed", "size"),
    [
        (500, 2, 100),  # room for the default
        (102, 2, 100),  # exactly room for it
        (101, 2, 20),  # no room: a fifth
        (40, 2, 8),  # the 40-row file
        (40, 36, 4),  # the batch needs 36: 4 left
        (4, 2, 1),  # a fifth of 4 rounds to 0: at least 1
        (8, 8, 0),  # the batch needs every prompt: none held out
    ],
)
def test_the_fitted_heldout_size(problems, needed, size):
    assert fitted_heldout_size(problems, needed) == size


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The tiny model, a 40-row file of distinct prompts and a coin-flip reward."""
    root = tmp_path_factory.mktemp("small")
    save_tiny_model(root / "model")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(8) for b in range(5)]
    (root / "d40.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "coin.py").write_text(
        "def coin(prompts, completions, **kwargs):\n"
        "    return [float(i % 2) for i, _ in enumerate(completions)]\n"
    )
    return root


def _args(root, out, *extra: str) -> list[str]:
    return ["train", "--model", str(root / "model"), "--dataset", str(root / "d40.jsonl"),
            "--rewards", f"{root / 'coin.py'}:coin", "--output_dir", str(out),
            "--eval_n", "2", "--max_steps", "1", "--num_generations", "4",
            "--per_device_train_batch_size", "8", "--max_completion_length", "4",
            "--learning_rate", "0.01", "--warmup_steps", "0", "--save_strategy", "no",
            "--chat_template", "false", *extra]  # fmt: skip


def test_a_40_row_file_gets_a_heldout_split_that_fits_and_says_so(files, tmp_path, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="contrastive_rlvr"):
        result = cli(_args(files, out))
    assert result.exit_code == 0, result.output
    logged = "\n".join(r.getMessage() for r in caplog.records)
    # 40 prompts, 8 x 1 / 4 = 2 a batch: 100 do not fit, a fifth (8) does
    assert (
        "40 distinct prompts, too few to hold out heldout_size=100 and keep the 2 prompt(s) "
        "one generation batch needs: holding out 8 for the held-out avg@n" in logged
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout_before"]["problems"] == 8
    assert summary["heldout_before"]["samples"] == 8 * 2
    # config.yaml records what was asked (the split follows from it and the data)
    assert "heldout_size: 100\n" in (out / "config.yaml").read_text()
    # progress of the held-out scoring: a start and an end line, before and after RL
    for when in ("before", "after"):
        assert f"held-out avg@2 {when} RL: sampling 16 completions (8 problems x 2" in logged
        assert f"held-out avg@2 {when} RL: 16 of 16 completions in " in logged
    # the terminal: the outcome with its interval, and where the summary is (not as JSON)
    assert "; after: 95% Wilson interval [" in result.output
    assert f"summary: {out / 'summary.json'}" in result.output
    assert not any(line.startswith("{") for line in result.output.splitlines())


def test_heldout_size_0_turns_the_heldout_scoring_off(files, tmp_path):
    out = tmp_path / "run"
    result = cli(_args(files, out, "--heldout_size", "0"))
    assert result.exit_code == 0, result.output
    assert "no held-out scoring (heldout_size=0): 1 steps" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout_avg@n_before"] is None and summary["heldout_after"] is None
    assert summary["steps"] == 1
    assert not (out / "samples").exists()


def test_a_set_heldout_size_too_large_is_still_refused_naming_0(files, tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "a model was loaded before the split was checked")
    one_line(cli(_args(files, tmp_path / "r", "--heldout_size", "40")), 2,
             "heldout_size=40 leaves no training rows")  # fmt: skip
    one_line(cli(_args(files, tmp_path / "r", "--heldout_size", "-1")), 2,
             "heldout_size=-1 is invalid")  # fmt: skip


def test_eval_strategy_without_heldout_rows_is_refused(files, tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "a model was loaded before the split was checked")
    args = _args(files, tmp_path / "r", "--heldout_size", "0", "--eval_strategy", "steps",
                 "--eval_steps", "1")  # fmt: skip
    one_line(cli(args), 2, "eval_strategy=steps evaluates on the held-out rows")
