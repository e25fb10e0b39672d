"""Resume: a run killed with SIGKILL after a checkpoint, then resumed with ``--resume``,
ends with the same weights as an uninterrupted run with the same seed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from transformers import TrainerCallback
    from contrastive_rlvr.run import train
    from contrastive_rlvr.trainer.parse import parse_config

    out, kill_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # no clean-up, as a crash would

    config = parse_config(None, [
        "--output_dir", out, "--max_steps", "4", "--save_steps", "2",
        "--embedded_sft_steps", "200", "--eval_n", "1", "--eval_limit", "2",
        "--num_generations", "4", "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3", "--resume", "1" if resume else "0",
    ])
    train(config, extra_callbacks=[KillAfterSave()], progress=False)
    """
)


def run(script: Path, out: Path, kill_at: int, resume: bool) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(out), str(kill_at), "1" if resume else "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode not in (0, -9):
        raise AssertionError(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert run(script, straight, kill_at=-1, resume=False) == 0
    # The warm start is reused from the output directory: do it once.
    shutil.copytree(straight / "sft-model", killed / "sft-model")
    assert run(script, killed, kill_at=2, resume=False) == -9  # SIGKILL right after checkpoint-2
    assert (killed / "checkpoint-2").exists() and not (killed / "checkpoint-4").exists()
    assert run(script, killed, kill_at=-1, resume=True) == 0
    a = load_file(straight / "checkpoint-4" / "model.safetensors")
    b = load_file(killed / "checkpoint-4" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        # Same samples, same updates: equal to float32 round-off.
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=1e-5, msg=name)
    start = load_file(straight / "sft-model" / "model.safetensors")
    assert any(not torch.equal(start[n], a[n]) for n in a), "training should move the weights"
    # metrics.jsonl of the resumed run holds each step once.
    steps = [line.split(",")[0] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 4 and len(set(steps)) == 4


def test_resume_without_checkpoint_is_an_error(tmp_path):
    from contrastive_rlvr.run import train
    from contrastive_rlvr.trainer.parse import parse_config

    config = parse_config(None, ["--output_dir", str(tmp_path / "empty"), "--resume", "1"])
    with pytest.raises(ValueError, match="no checkpoint"):
        train(config)
