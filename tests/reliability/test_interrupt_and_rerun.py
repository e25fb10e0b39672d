"""A run stopped by Ctrl-C, continued, and run again, the TRL way: a Ctrl-C while a
checkpoint is written finishes it (a second abandons it, removing the folder) and the
command that continues is printed; TRL's ``--resume_from_checkpoint true|PATH`` resumes;
the same command on a finished run (``make demo`` twice) reports it and exits 0.

Ctrl-C is a real SIGINT sent to this process from inside the checkpoint write (the
model's ``save_pretrained``), as a user's key press would arrive."""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from pathlib import Path

import pytest
from trainer_utils import _tiny_run_args
from transformers import PreTrainedModel
from typer.testing import CliRunner

from contrastive_rlvr.checkpoints import checkpoint_problems
from contrastive_rlvr.cli import app
from contrastive_rlvr.trainer.interrupts import continue_command


def _args(tmp_path: Path) -> list[str]:
    """Two steps of the tiny model with a checkpoint after each."""
    args = _tiny_run_args(tmp_path)
    args[args.index("--max_steps") + 1] = "2"
    args[args.index("--save_strategy") + 1] = "steps"
    return [*args, "--save_steps", "1"]


def _ctrl_c_in_checkpoint_write(monkeypatch, presses: int) -> None:
    """Send ``presses`` SIGINTs to this process from the first checkpoint's weight save."""
    real = PreTrainedModel.save_pretrained
    sent = []

    def save_pretrained(self, folder, *args, **kwargs):
        if not sent and "checkpoint-" in str(folder):
            sent.append(folder)
            for _ in range(presses):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs between bytecodes
        return real(self, folder, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)


def test_ctrl_c_during_a_checkpoint_write_finishes_it_and_prints_the_next_command(
    tmp_path, monkeypatch
):
    args = _args(tmp_path)
    _ctrl_c_in_checkpoint_write(monkeypatch, presses=1)
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 130, result.output
    out = tmp_path / "out"
    assert checkpoint_problems(out / "checkpoint-1") == []  # whole, every file
    assert not (out / "checkpoint-2").exists()
    note = [ln for ln in result.output.splitlines() if "Continue with:" in ln]
    assert note and "checkpoint-1 in" in note[0]
    command = shlex.split(note[0].split("Continue with: ", 1)[1])
    assert command[:2] == ["contrastive-rlvr", "train"] and command[-2:] == ["--resume", "true"]
    monkeypatch.undo()
    again = CliRunner().invoke(app, command[1:])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_a_second_ctrl_c_abandons_the_checkpoint(tmp_path, monkeypatch):
    _ctrl_c_in_checkpoint_write(monkeypatch, presses=2)
    result = CliRunner().invoke(app, ["train", *_args(tmp_path)])
    assert result.exit_code == 130, result.output
    assert not (tmp_path / "out" / "checkpoint-1").exists()  # no half-written checkpoint
    assert "abandoned checkpoint-1" in result.output
    assert "before any complete checkpoint" in result.output
    assert "--overwrite_output_dir true" in result.output


def test_continue_command_replaces_the_resume_options():
    overrides = ["--model", "m", "--resume", "false", "--overwrite_output_dir=true", "--seed", "1"]
    assert continue_command("c.yaml", overrides) == (
        "contrastive-rlvr train --config c.yaml --model m --seed 1 --resume true"
    )


@pytest.fixture
def finished_run(tmp_path):
    args = _args(tmp_path)
    first = CliRunner().invoke(app, ["train", *args])
    assert first.exit_code == 0, first.output
    return tmp_path, args


def test_the_same_command_again_reports_the_finished_run(finished_run, caplog):
    tmp_path, args = finished_run
    summary = (tmp_path / "out" / "summary.json").read_text()
    metrics = (tmp_path / "out" / "metrics.jsonl").read_text()
    again = CliRunner().invoke(app, ["train", *args])
    assert again.exit_code == 0, again.output
    assert "held-out avg@1" in again.output and "finished already" in caplog.text
    assert (tmp_path / "out" / "summary.json").read_text() == summary  # not trained again
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == metrics


def test_resume_from_checkpoint_true_and_a_path(finished_run):
    tmp_path, args = finished_run
    out = tmp_path / "out"
    (out / "summary.json").unlink()  # as if stopped after its last checkpoint
    result = CliRunner().invoke(app, ["train", *args, "--resume_from_checkpoint", "true"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    # a named checkpoint: from step 1, one step more
    (out / "summary.json").unlink()
    named = ["--resume_from_checkpoint", str(out / "checkpoint-1")]
    result = CliRunner().invoke(app, ["train", *args, *named])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    # a checkpoint that is not whole is refused, before any model loads
    (out / "summary.json").unlink()
    (out / "checkpoint-1" / "optimizer.pt").unlink()
    result = CliRunner().invoke(app, ["train", *args, *named])
    assert result.exit_code == 2, result.output
    assert "resume_from_checkpoint=" in result.output and "optimizer.pt is missing" in result.output
