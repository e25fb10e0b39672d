"""A run that learns nothing says so, and why: each cause made to happen and its message
checked (the monitor on hand-made logs, then a whole run on a tiny model that meets
every cause), the held-out samples and the field mapping of a GSM8K-layout file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from trainer_utils import save_tiny_model

from contrastive_rlvr.errors import AllUpdatesSkipped
from contrastive_rlvr.rewards import MathVerifyReward
from contrastive_rlvr.run import train
from contrastive_rlvr.trainer.learning_signal import LearningSignal, warmup_problem
from contrastive_rlvr.trainer.parse import parse_config

GSM8K_TINY = Path(__file__).parents[1] / "fixtures" / "gsm8k_tiny.jsonl"


def _monitor(rewards=(), names=()):
    trainer = SimpleNamespace(reward_funcs=list(rewards), reward_func_names=list(names))
    return LearningSignal(trainer)


def _args(**kw):
    values = dict(max_completion_length=16)
    values.update(kw)
    return SimpleNamespace(**values)


def test_groups_all_wrong_with_zero_gradient_are_named():
    m = _monitor()
    step = {"reward": 0.0, "adv/collapse_rate": 1.0, "adv/collapse_wrong_rate": 1.0,
            "adv/collapse_correct_rate": 0.0, "grad_norm": 0.0}  # fmt: skip
    m.observe(step)
    message = m.current_causes(_args())["collapsed"]
    assert "100% of groups over 1 logged step" in message
    assert "all wrong, e.g. all 0: 100%; all correct, e.g. all 1: 0%" in message
    assert "gradient norm 0 at 1 of 1 logged step" in message
    assert "too hard for the model, or the reward does not read its answers" in message
    assert "never told completions apart" in m.learned_nothing()


def test_groups_all_correct_are_named_too_easy():
    m = _monitor()
    # Two steps: 3/4 then 1/2 of the groups collapsed, all of them correct ones.
    m.observe({"reward": 1.0, "adv/collapse_rate": 0.75, "adv/collapse_wrong_rate": 0.0,
               "adv/collapse_correct_rate": 0.75, "grad_norm": 0.3})  # fmt: skip
    m.observe({"reward": 1.0, "adv/collapse_rate": 0.5, "adv/collapse_wrong_rate": 0.0,
               "adv/collapse_correct_rate": 0.5, "grad_norm": 0.2})  # fmt: skip
    message = m.current_causes(_args())["collapsed"]
    # mean of 0.75 and 0.5 is 62.5%, printed 62% (round half to even)
    assert "62% of groups over 2 logged steps" in message
    assert "all correct, e.g. all 1: 62%" in message and "too easy" in message
    assert "gradient norm 0 at 0 of 2" in message
    assert m.learned_nothing() is None  # some groups told completions apart


def test_half_the_groups_collapsed_is_not_most():
    m = _monitor()
    m.observe({"reward": 0.5, "adv/collapse_rate": 0.5, "grad_norm": 1.0})
    assert "collapsed" not in m.current_causes(_args())


def test_zero_gradient_at_every_step_learns_nothing():
    m = _monitor()
    for _ in range(3):
        m.observe({"reward": 0.4, "adv/collapse_rate": 0.0, "grad_norm": 0.0})
    assert m.learned_nothing() == "the gradient norm was 0 at every one of the 3 logged " \
        "steps: the run learned nothing"  # fmt: skip


def test_most_completions_truncated():
    m = _monitor()
    m.observe({"reward": 0.0, "completions/clipped_ratio": 0.9})
    m.observe({"reward": 0.0, "completions/clipped_ratio": 0.8})
    message = m.current_causes(_args(max_completion_length=1024))["truncated"]
    assert message.startswith("most completions were cut at max_completion_length=1024: 85%")
    m2 = _monitor()
    m2.observe({"reward": 0.0, "completions/clipped_ratio": 0.5})
    assert "truncated" not in m2.current_causes(_args())


def test_a_one_step_run_inside_its_warm_up_says_the_rate_stays_at_0():
    # paper.yaml's warmup_steps 0.0333 of max_steps=1 rounds up to 1 step: lr * 0 / 1
    args = SimpleNamespace(lr_scheduler_type="cosine", learning_rate=1e-6, warmup_steps=0.0333,
                           get_warmup_steps=lambda n: 1)  # fmt: skip
    message = warmup_problem(args, 1)
    assert "is 1 step of max_steps=1, so the learning rate stays at 0 and never" in message


def test_a_cause_warned_early_that_stops_holding_stays_in_the_summary(caplog):
    """The GSM8K first run: 62% of step 1's completions cut (warned), 12% of step 2's, so
    over the run not most: the summary keeps the warning under ``held_earlier``."""
    m = _monitor()
    state = SimpleNamespace(is_world_process_zero=True)
    args = _args(max_completion_length=1024)
    with caplog.at_level(logging.WARNING):
        m.on_log(args, state, None, logs={"reward": 0.0, "completions/clipped_ratio": 0.625})
        m.on_log(args, state, None, logs={"reward": 0.0, "completions/clipped_ratio": 0.125})
    summary = m.summary(args)
    assert "truncated" not in summary["causes"]  # (0.625 + 0.125) / 2 = 37.5%: not most
    assert summary["held_earlier"]["truncated"].startswith(
        "most completions were cut at max_completion_length=1024: 62% over 1 logged step"
    )
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("62% over 1 logged step" in w for w in warned)


def test_no_parseable_answer_names_the_formats_and_the_fix():
    reward = MathVerifyReward(workers=1)
    m = _monitor([reward], ["math_verify"])
    m.on_train_begin(_args(lr_scheduler_type="constant"), SimpleNamespace(max_steps=0), None)
    # No completion states an answer: nothing reaches the verifier pool.
    reward(completions=["I think it is big", "hmm"], answer=["4", "4"])
    m.on_step_end(None, None, None)
    m.observe({"reward": 0.0})
    message = m.current_causes(_args())["no_answer"]
    assert message == (
        "no completion of the 2 scored so far states an answer the reward 'math_verify' "
        "reads, so every one scores 0: it reads <answer>...</answer>, \\boxed{...}, an "
        "'Answer: X' line or 'the answer is X' in prose; set --last_number_fallback true, "
        "or instruct the model to box its answer"
    )
    # One answer read: the cause no longer holds.
    reward(completions=["So, the final answer is 4."], answer=["5"])
    m.on_step_end(None, None, None)
    m.observe({"reward": 0.0})
    assert "no_answer" not in m.current_causes(_args())
    reward.close()


def _warmup_args(warmup_steps, schedule="cosine", lr=1e-6):
    config = parse_config(None, ["--model", "m", "--dataset", "d.jsonl",
                                 "--warmup_steps", str(warmup_steps),
                                 "--lr_scheduler_type", schedule,
                                 "--learning_rate", str(lr)])  # fmt: skip
    return config


def test_warmup_past_max_steps_is_a_cause():
    message = warmup_problem(_warmup_args(100), max_steps=2)
    # linear warm-up: step k runs at lr * k / 100, the last (k = 1) at 1e-8
    assert message.startswith(
        "the learning-rate warm-up lasts the whole run: warmup_steps=100 is 100 steps of "
        "max_steps=2, so the learning rate rises from 0 to 1e-08 and never reaches "
        "learning_rate=1e-06"
    )
    assert warmup_problem(_warmup_args(2), max_steps=2) is not None  # at max_steps too
    assert warmup_problem(_warmup_args(1), max_steps=2) is None
    assert warmup_problem(_warmup_args(0.0333), max_steps=2) is None  # ratio: 1 step
    assert warmup_problem(_warmup_args(100, schedule="constant"), max_steps=2) is None


# -- a whole run that meets every cause ------------------------------------------------


def _run_args(tmp_path, model_dir, *extra):
    return [
        "--model", str(model_dir), "--dataset", str(GSM8K_TINY),
        "--output_dir", str(tmp_path / "out"), "--heldout_size", "2", "--eval_n", "2",
        "--max_steps", "2", "--num_generations", "4", "--per_device_train_batch_size", "8",
        # 4 tokens: the random model never ends a completion (every one truncated)
        "--max_completion_length", "4", "--warmup_steps", "100",
        "--lr_scheduler_type", "cosine", "--bicc", "false", "--rcc", "false",
        "--save_strategy", "no", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("model"))


def test_a_run_that_learns_nothing_says_why_during_the_run_and_after(tiny_model, tmp_path, caplog):
    torch.set_num_threads(1)
    config = parse_config(None, _run_args(tmp_path, tiny_model))
    with caplog.at_level(logging.INFO):
        summary = train(config, progress=False)
    # During the run: one warning per cause, the warm-up's at the start.
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [w for w in warned if w.startswith("the run may learn nothing: ")]
    assert len(said) == 4, warned
    assert "warm-up lasts the whole run" in said[0]
    for needle in ("most groups had all rewards equal", "most completions were cut",
                   "no completion of the"):  # fmt: skip
        assert sum(needle in w for w in said) == 1
    # In the summary: the same causes and the verdict.
    signal = summary["learning_signal"]
    assert set(signal["causes"]) == {"warmup", "collapsed", "truncated", "no_answer"}
    assert "all wrong, e.g. all 0: 100%" in signal["causes"]["collapsed"]
    assert "gradient norm 0 at 2 of 2 logged steps" in signal["causes"]["collapsed"]
    assert "never told completions apart" in signal["learned_nothing"]
    assert summary["heldout_reward"] == "math_verify"
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["learning_signal"] == signal
    # The field mapping and the answer reduction, once at the start.
    infos = [r.getMessage() for r in caplog.records if r.name == "contrastive_rlvr.start"]
    mapping = [m for m in infos if "prompt <- " in m]
    assert len(mapping) == 1
    assert "prompt <- 'question', answer <- 'answer' (12 of 12 answers reduced from " \
        "GSM8K's '... #### N' to N), id <- the row's position" in mapping[0]  # fmt: skip
    # The held-out samples, before and after, as eval writes them.
    for label in ("before", "after"):
        samples = tmp_path / "out" / "samples" / f"heldout_{label}.jsonl"
        rows = [json.loads(x) for x in samples.read_text().splitlines()]
        assert len(rows) == 2 * 2  # heldout_size x eval_n
        assert {"problem_id", "prompt", "completion", "answer", "reward", "gold"} <= set(rows[0])
        assert all(r["reward"] == 0.0 and r["answer"] is None for r in rows)
        golds = {r["gold"] for r in rows}
        assert all(g.isdigit() for g in golds)  # the reduced answers (#### N -> N)


def test_no_learning_signal_error_makes_it_an_error(tiny_model, tmp_path):
    config = parse_config(
        None, _run_args(tmp_path, tiny_model, "--no_learning_signal", "error", "--eval_n", "1")
    )
    with pytest.raises(AllUpdatesSkipped, match="never told completions apart"):
        train(config, progress=False)
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "no_learning_signal=error" in saved["error"]


REWARDS_A = "def score(prompts, completions, **kw):\n    return [0.0 for _ in completions]\n"
REWARDS_B = "def score(prompts, completions, **kw):\n    return [1.0 for _ in completions]\n"


def test_same_named_rewards_log_apart_and_format_is_not_the_heldout_reward(tiny_model, tmp_path):
    (tmp_path / "a.py").write_text(REWARDS_A)
    (tmp_path / "b.py").write_text(REWARDS_B)
    config = parse_config(None, _run_args(
        tmp_path, tiny_model, "--eval_n", "1", "--max_steps", "1",
        "--rewards", "format", f"{tmp_path / 'a.py'}:score", f"{tmp_path / 'b.py'}:score",
    ))  # fmt: skip
    summary = train(config, progress=False)
    # The first reward is a format reward: the held-out score is another's, and named.
    assert summary["heldout_reward"] == f"{tmp_path / 'a.py'}:score"
    row = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    # a.py's score is always 0, b.py's always 1: two keys, not one blend of 0.5.
    assert row["rewards/score/mean"] == 0.0
    assert row["rewards/score_2/mean"] == 1.0
    # Every completion's total reward is 0 + 0 + 1: every group all correct.
    collapsed = summary["learning_signal"]["causes"]["collapsed"]
    assert "all correct, e.g. all 1: 100%" in collapsed and "too easy" in collapsed
