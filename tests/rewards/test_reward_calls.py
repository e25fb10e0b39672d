"""Reward function calls: a deadline per call (a reward that blocks forever is an error
naming it, not a hang), numpy scalars accepted, and a reward that changes directory
does not move the run's folder. Each test makes the fault happen."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from cli_utils import cli
from trainer_utils import save_tiny_model

from contrastive_rlvr.errors import RewardTimeoutError
from contrastive_rlvr.rewards import deadline
from contrastive_rlvr.rewards.deadline import DeadlineExceeded, call_with_deadline
from contrastive_rlvr.trainer.reward_guards import GuardedReward


def _blocks_forever(prompts, completions, **kwargs):
    threading.Event().wait()  # a lock nobody releases


def test_a_reward_that_blocks_forever_is_an_error_naming_it():
    guarded = GuardedReward(_blocks_forever, "stuck", timeout=0.5)
    with pytest.raises(RewardTimeoutError, match=r"'stuck' did not return within reward_timeout"):
        guarded(prompts=["p"] * 2, completions=["a", "b"])


def test_the_deadline_is_not_swallowed_by_the_functions_own_except():
    seen = []

    def stubborn():
        for _ in range(100):
            try:
                time.sleep(3600)
            except Exception as err:
                seen.append(err)
        return "never"

    with pytest.raises(DeadlineExceeded):
        call_with_deadline(stubborn, 0.3)
    assert seen == []


def test_a_call_that_returns_in_time_is_untouched_and_handlers_are_restored():
    before = signal.getsignal(deadline.DEADLINE_SIGNAL)
    assert call_with_deadline(lambda: [1.0, 0.0], 60) == [1.0, 0.0]
    assert call_with_deadline(lambda: "no deadline", 0) == "no deadline"
    assert signal.getsignal(deadline.DEADLINE_SIGNAL) == before


def test_a_signal_that_is_not_the_deadlines_reaches_the_handler_before_it():
    received = []
    previous = signal.signal(deadline.DEADLINE_SIGNAL, lambda s, f: received.append(s))
    try:

        def signals_itself():
            os.kill(os.getpid(), deadline.DEADLINE_SIGNAL)
            time.sleep(0.05)  # the handler runs here
            return "done"

        assert call_with_deadline(signals_itself, 60) == "done"
        assert received == [deadline.DEADLINE_SIGNAL]
    finally:
        signal.signal(deadline.DEADLINE_SIGNAL, previous)


def test_a_call_no_signal_can_stop_ends_the_process_with_one_line():
    # The deadline signal blocked (as C code that retries through signals behaves): the
    # watchdog ends the process after the grace instead of leaving it hanging.
    code = (
        "import signal, time\n"
        "from contrastive_rlvr.rewards import deadline as d\n"
        "d.HARD_EXIT_GRACE_S = 0.5\n"
        "def deaf():\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, {d.DEADLINE_SIGNAL})\n"
        "    time.sleep(3600)\n"
        "d.call_with_deadline(deaf, 0.5, label=\"reward function 'deaf'\")\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == deadline.HARD_EXIT_CODE, done.stderr
    assert done.stderr.startswith("error: reward function 'deaf' ran past its deadline of 0.5 s")
    assert done.stderr.count("\n") == 1


def test_numpy_bool_and_float_rewards_are_accepted():
    def numpy_values(prompts, completions, **kwargs):
        return [np.bool_(True), np.bool_(False), np.float32(0.25), np.array(0.5)]

    def numpy_array(prompts, completions, **kwargs):
        return np.array([True, False, False, True])

    completions = ["a", "b", "c", "d"]
    assert GuardedReward(numpy_values, "np")(["p"] * 4, completions) == [1.0, 0.0, 0.25, 0.5]
    assert GuardedReward(numpy_array, "arr")(["p"] * 4, completions) == [1.0, 0.0, 0.0, 1.0]


# ---------------------------------------------------------------------- real runs

REWARDS_SRC = """
import os
import threading

def parity(prompts, completions, completion_ids=None, **kwargs):
    return [float(len(c) % 2) for c in completions]

def blocks_in_training(prompts, completions, **kwargs):
    if "trainer_state" in kwargs:  # TRL's training call, not the held-out evaluation
        threading.Event().wait()
    return [float(len(c) % 2) for c in completions]

def moves(prompts, completions, **kwargs):
    os.chdir(os.environ["ELSEWHERE"])
    return [float(len(c) % 2) for c in completions]
"""


@pytest.fixture(scope="module")
def custom(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("custom")
    rows = [{"problem": f"{i}+{i}=", "answer": str(2 * i)} for i in range(6)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "rewards.py").write_text(REWARDS_SRC)
    save_tiny_model(root / "model")
    return {"root": root, "model": root / "model"}


def _train_args(custom, reward: str, *extra: str) -> list[str]:
    root = custom["root"]
    return [
        "train", "--model", str(custom["model"]), "--dataset", str(root / "data.jsonl"),
        "--rewards", reward, "--heldout_size", "1", "--num_generations", "4",
        "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
        "--max_completion_length", "6", "--max_steps", "1", "--eval_n", "1",
        "--eval_limit", "1", "--save_strategy", "no", *extra,
    ]  # fmt: skip


def test_a_run_whose_reward_blocks_forever_stops_with_one_line(custom, tmp_path):
    reward = f"{custom['root'] / 'rewards.py'}:blocks_in_training"
    args = _train_args(custom, reward, "--reward_timeout", "1", "--output_dir", str(tmp_path))
    result = cli(args)
    assert result.exit_code == 2, result.output
    assert (
        "error: reward function 'blocks_in_training' did not return within reward_timeout=1 s"
        in result.output
    )
    assert result.output.count("error:") == 1 and "Traceback" not in result.output


def test_a_reward_that_changes_directory_does_not_move_the_output_folder(
    custom, tmp_path, monkeypatch
):
    # At import and at every call: the run's relative output_dir stays where it was given.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "work").mkdir()
    reward_file = tmp_path / "moving.py"
    reward_file.write_text(
        f"import os\nos.chdir({str(elsewhere)!r})\n"
        + REWARDS_SRC.replace('os.environ["ELSEWHERE"]', repr(str(elsewhere)))
    )
    monkeypatch.chdir(tmp_path / "work")
    result = cli(_train_args(custom, f"{reward_file}:moves", "--output_dir", "run"))
    assert result.exit_code == 0, result.output
    assert Path.cwd() == tmp_path / "work"
    assert (tmp_path / "work" / "run" / "summary.json").exists()
    assert (tmp_path / "work" / "run" / "model.safetensors").exists()
    assert not (elsewhere / "run").exists()
