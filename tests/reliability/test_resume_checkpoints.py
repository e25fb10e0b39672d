"""Resume: the newest *complete* checkpoint is taken (incomplete ones skipped and named), a
finished run is only reported, a changed config is refused, and so is a fresh run into a
directory that holds another run. The faults are made for real: truncated and deleted
files, a corrupt trainer_state.json, a process SIGKILLed in the middle of a save."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from contrastive_rlvr.checkpoints import checkpoint_problems, newest_complete_checkpoint
from contrastive_rlvr.cli import app
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run import train
from contrastive_rlvr.run.config_compare import config_differences
from contrastive_rlvr.trainer.parse import parse_config

ARGS = [
    "--max_steps", "4", "--save_steps", "2", "--embedded_sft_steps", "200", "--eval_n", "1",
    "--eval_limit", "2", "--num_generations", "4", "--per_device_train_batch_size", "8",
    "--learning_rate", "1e-3", "--diagnostics_every", "0", "--deltas_every", "0",
]  # fmt: skip


def config_for(out: Path, *extra: str):
    return parse_config(None, ["--output_dir", str(out), *ARGS, *extra])


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """An uninterrupted 4-step run with checkpoints at steps 2 and 4."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("resume") / "straight"
    train(config_for(out), progress=False)
    # The reference weights, kept aside: later tests copy and damage the run.
    shutil.copyfile(out / "checkpoint-4" / "model.safetensors", out.parent / "final.safetensors")
    return out


def interrupted_copy(straight: Path, dest: Path) -> Path:
    """The straight run as it would be if it had stopped during the save of step 4."""
    shutil.copytree(straight, dest)
    (dest / "summary.json").unlink()
    return dest


def assert_same_weights(a: Path, b: Path) -> None:
    x, y = load_file(a), load_file(b)
    assert x.keys() == y.keys()
    for name in x:
        torch.testing.assert_close(x[name], y[name], atol=1e-6, rtol=1e-5, msg=name)


def _truncate(ckpt: Path) -> None:
    f = ckpt / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _no_optimizer(ckpt: Path) -> None:
    (ckpt / "optimizer.pt").unlink()


def _corrupt_state(ckpt: Path) -> None:
    text = (ckpt / "trainer_state.json").read_text()
    (ckpt / "trainer_state.json").write_text(text[: len(text) // 2])


def _truncate_scheduler(ckpt: Path) -> None:
    f = ckpt / "scheduler.pt"
    f.write_bytes(f.read_bytes()[:-30])


FAULTS = {
    "truncated model.safetensors": (_truncate, "model.safetensors is"),
    "deleted optimizer.pt": (_no_optimizer, "optimizer.pt is missing"),
    "corrupt trainer_state.json": (_corrupt_state, "trainer_state.json does not parse"),
    "truncated scheduler.pt": (_truncate_scheduler, "scheduler.pt is not a whole torch archive"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_incomplete_newest_checkpoint_is_skipped(fault, straight, tmp_path, caplog):
    damage, problem = FAULTS[fault]
    run = interrupted_copy(straight, tmp_path / "run")
    damage(run / "checkpoint-4")
    ckpt, skipped = newest_complete_checkpoint(run)
    assert ckpt == run / "checkpoint-2"
    assert [p.name for p, _ in skipped] == ["checkpoint-4"]
    assert any(problem in why for why in skipped[0][1]), skipped
    with caplog.at_level(logging.WARNING):
        summary = train(config_for(run, "--resume", "true"), progress=False)
    assert summary["steps"] == 4
    assert "skipped incomplete checkpoint-4" in caplog.text and "checkpoint-2" in caplog.text
    # resumed from step 2, it ends where the uninterrupted run ended
    assert checkpoint_problems(run / "checkpoint-4") == []
    assert_same_weights(
        run / "checkpoint-4" / "model.safetensors", straight.parent / "final.safetensors"
    )
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


KILL_MID_SAVE = textwrap.dedent(
    """
    import os, resource, signal, sys
    from transformers import Trainer, TrainerCallback
    from contrastive_rlvr.run import train
    from contrastive_rlvr.trainer.parse import parse_config

    out, mode = sys.argv[1], sys.argv[2]
    real = Trainer._save_rng_state

    def save_rng_then_die(self, output_dir):
        # Weights, optimizer and scheduler of checkpoint-4 are on disk; trainer_state.json
        # is not yet: the process dies here, as under SIGKILL or a power cut.
        real(self, output_dir)
        if self.state.global_step == 4:
            os.kill(os.getpid(), signal.SIGKILL)

    class DiskFullAfterCheckpoint2(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                # No file may grow past half of the weights file any more: the next save
                # of model.safetensors fails part-way, as on a full disk.
                limit = os.path.getsize(os.path.join(out, "checkpoint-2", "model.safetensors"))
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit // 2, limit // 2))

    if mode == "kill":
        Trainer._save_rng_state = save_rng_then_die
    callbacks = [DiskFullAfterCheckpoint2()] if mode == "disk" else []
    resume = "true" if mode == "resume" else "false"
    config = parse_config(None, ["--output_dir", out, *sys.argv[3:], "--resume", resume])
    train(config, extra_callbacks=callbacks, progress=False)
    """
)


def _launch(script: Path, run: Path, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(script), str(run), mode, *ARGS],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_sigkill_in_the_middle_of_a_save_then_resume(straight, tmp_path):
    script = tmp_path / "kill.py"
    script.write_text(KILL_MID_SAVE)
    run = tmp_path / "killed"
    shutil.copytree(straight / "sft-model", run / "sft-model")
    killed = _launch(script, run, "kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert checkpoint_problems(run / "checkpoint-4") == ["trainer_state.json is missing"]
    resumed = _launch(script, run, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipped incomplete checkpoint-4" in resumed.stderr
    assert_same_weights(
        run / "checkpoint-4" / "model.safetensors", straight.parent / "final.safetensors"
    )


def test_disk_full_during_a_save_then_resume(straight, tmp_path):
    script = tmp_path / "disk.py"
    script.write_text(KILL_MID_SAVE)
    run = tmp_path / "full"
    shutil.copytree(straight / "sft-model", run / "sft-model")
    failed = _launch(script, run, "disk")
    assert failed.returncode != 0
    problems = checkpoint_problems(run / "checkpoint-4")
    assert problems and "model.safetensors" in problems[0], problems
    resumed = _launch(script, run, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipped incomplete checkpoint-4" in resumed.stderr
    assert_same_weights(
        run / "checkpoint-4" / "model.safetensors", straight.parent / "final.safetensors"
    )


def test_resume_on_a_finished_run_only_reports(straight, tmp_path, caplog):
    run = tmp_path / "done"
    shutil.copytree(straight, run)
    summary_before = (run / "summary.json").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    with caplog.at_level(logging.WARNING):
        summary = train(config_for(run, "--resume", "true"), progress=False)
    assert "finished already" in caplog.text
    assert summary == json.loads(summary_before)
    assert not (run / "checkpoint-6").exists()
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == stamps


def test_stopped_after_the_last_checkpoint_evaluates_only(straight, tmp_path):
    # killed after checkpoint-4 was saved, before summary.json: no step 5
    run = interrupted_copy(straight, tmp_path / "run")
    before = (run / "checkpoint-4" / "trainer_state.json").read_text()
    summary = train(config_for(run, "--resume", "true"), progress=False)
    assert summary["steps"] == 4 and not (run / "checkpoint-5").exists()
    assert (run / "checkpoint-4" / "trainer_state.json").read_text() == before
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    finished = json.loads((straight / "summary.json").read_text())
    assert summary["heldout_avg@n_after"] == finished["heldout_avg@n_after"]


CHANGES = {
    "learning_rate": (["--learning_rate", "5e-4"], "learning_rate: 0.001 -> 0.0005"),
    "recipe": (["--recipe", "dapo"], "recipe: 'grpo' -> 'dapo'"),
    "group size": (["--num_generations", "2"], "num_generations: 4 -> 2"),
    "bicc": (["--bicc", "false"], "bicc: True -> False"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_resume_with_a_changed_config_is_refused(change, straight, tmp_path):
    extra, named = CHANGES[change]
    run = interrupted_copy(straight, tmp_path / "run")
    config_yaml = (run / "config.yaml").read_text()
    with pytest.raises(UserError, match="differs from") as err:
        train(config_for(run, "--resume", "true", *extra), progress=False)
    assert named in str(err.value)
    assert (run / "config.yaml").read_text() == config_yaml  # not overwritten


def test_resume_ignores_fields_that_do_not_change_training(straight, tmp_path):
    saved = config_for(tmp_path / "a").to_dict()
    other = config_for(tmp_path / "b", "--logging_steps", "5", "--save_steps", "3", "--eval_n", "2")
    assert config_differences(saved, other.to_dict()) == []
    changed = config_for(tmp_path / "c", "--learning_rate", "2e-3", "--beta", "0.1")
    assert config_differences(saved, changed.to_dict()) == [
        "beta: 0.0 -> 0.1", "learning_rate: 0.001 -> 0.002"
    ]  # fmt: skip


def test_changed_config_allowed_when_asked(straight, tmp_path):
    run = interrupted_copy(straight, tmp_path / "run")
    shutil.rmtree(run / "checkpoint-4")
    config = config_for(run, "--resume", "true", "--learning_rate", "5e-4")
    config.resume_allow_config_change = True  # the option's field (see docs/reliability.md)
    summary = train(config, progress=False)
    assert summary["steps"] == 4
    assert "learning_rate: 0.001" in (run / "config.before-resume.yaml").read_text()


def test_fresh_run_into_a_used_directory_is_refused(straight, tmp_path):
    run = tmp_path / "used"
    shutil.copytree(straight, run)
    # another training setting: the same command again would report the finished run
    other = [*ARGS, "--learning_rate", "2e-3"]
    result = CliRunner().invoke(app, ["train", "--output_dir", str(run), *other])
    assert result.exit_code == 2, result.output
    assert "already holds a run" in result.output and "overwrite_output_dir" in result.output
    assert (run / "checkpoint-2").exists() and (run / "checkpoint-4").exists()
    # told to: the old run is replaced (the warm start is kept and reused)
    config = config_for(run, "--max_steps", "2")
    config.overwrite_output_dir = True
    summary = train(config, progress=False)
    assert summary["steps"] == 2 and not (run / "checkpoint-4").exists()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2


def test_no_complete_checkpoint_names_every_incomplete_one(straight, tmp_path):
    run = interrupted_copy(straight, tmp_path / "run")
    _no_optimizer(run / "checkpoint-4")
    _corrupt_state(run / "checkpoint-2")
    with pytest.raises(UserError, match="no checkpoint in .* is complete") as err:
        train(config_for(run, "--resume", "true"), progress=False)
    message = str(err.value)
    assert "checkpoint-4: optimizer.pt is missing" in message
    assert "checkpoint-2: trainer_state.json does not parse" in message
