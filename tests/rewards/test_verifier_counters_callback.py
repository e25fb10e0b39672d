"""VerifierCountersCallback: the reward's verifier counters in every logged training step."""

from __future__ import annotations

import json
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model, token_parity_reward

from contrastive_rlvr.rewards import MathVerifyReward, VerifierCountersCallback


class CountingReward:
    """Token-parity rewards plus verifier-style counters that move on every call:
    call k has seen k timeouts and 2k killed answers, one restart per call."""

    __name__ = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        self.calls += 1
        return token_parity_reward(prompts, completions, completion_ids)

    def counters(self) -> dict[str, float]:
        k = float(self.calls)
        return {"verifier/timeouts": k, "verifier/killed": 2 * k, "verifier/worker_restarts": k}


def fake_trainer(rewards, num_processes=1):
    accelerator = SimpleNamespace(
        num_processes=num_processes,
        device="cpu",
        # Every other process reports the same counts as this one.
        reduce=lambda t, reduction: t * num_processes,
    )
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return SimpleNamespace(reward_funcs=rewards, _metrics=metrics, accelerator=accelerator)


def step_end(callback):
    return callback.on_step_end(None, None, "control")


def test_counters_summed_over_rewards_and_replaced_each_step():
    a, b = CountingReward(), CountingReward()
    trainer = fake_trainer([a, token_parity_reward, b])  # a plain function has no counters
    trainer._metrics["train"]["reward"].append(0.5)  # the trainer's own metrics stay
    callback = VerifierCountersCallback(trainer)
    a.calls, b.calls = 3, 1
    assert step_end(callback) == "control"
    metrics = trainer._metrics["train"]
    # 3 + 1 timeouts, 2*3 + 2*1 killed, 3 + 1 restarts
    assert metrics["verifier/timeouts"] == [4.0]
    assert metrics["verifier/killed"] == [8.0]
    assert metrics["verifier/worker_restarts"] == [4.0]
    assert metrics["reward"] == [0.5]
    a.calls = 5
    step_end(callback)
    # Replaced, not appended: TRL's log averages the list, a count must stay a count.
    assert metrics["verifier/timeouts"] == [6.0]


def test_counters_summed_over_processes():
    reward = CountingReward()
    reward.calls = 2
    trainer = fake_trainer([reward], num_processes=4)
    step_end(VerifierCountersCallback(trainer))
    assert trainer._metrics["train"]["verifier/timeouts"] == [8.0]  # 2 per process x 4


def test_no_counter_rewards_log_nothing_and_bad_trainer_is_refused():
    trainer = fake_trainer([token_parity_reward])
    step_end(VerifierCountersCallback(trainer))
    assert dict(trainer._metrics["train"]) == {}
    with pytest.raises(TypeError, match="needs a TRL GRPOTrainer"):
        VerifierCountersCallback(SimpleNamespace(reward_funcs=[]))


class HostileMathReward(MathVerifyReward):
    """A real MathVerifyReward that also checks one hostile answer per call (a
    power tower: the worker's alarm fires or the worker is killed), then
    returns token-parity rewards so that the groups stay mixed."""

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        assert self.score(["\\boxed{9^{9^{9^9}}}"], ["5"])[0].reward == 0.0
        return token_parity_reward(prompts, completions, completion_ids)


def test_counters_reach_metrics_jsonl_during_train(tmp_path):
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "tiny")
    config = make_config(tmp_path, max_steps=3)
    with HostileMathReward(timeout=1, workers=1, max_answer_chars=None) as reward:
        # RLVRTrainer attaches MetricsJsonl and VerifierCountersCallback itself.
        trainer = make_trainer(model_dir, config, reward=reward)
        trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    # One generation (one reward call, one hostile answer) per step with these
    # settings, so after step k, k answers were stopped: timed out or killed.
    assert [r["step"] for r in rows] == [1, 2, 3]
    stopped = [r["verifier/timeouts"] + r["verifier/killed"] for r in rows]
    assert stopped == [1.0, 2.0, 3.0]
    assert all(r["verifier/crashed"] == 0.0 for r in rows)
    # A killed worker is replaced: one restart per kill.
    assert [r["verifier/worker_restarts"] for r in rows] == [r["verifier/killed"] for r in rows]
    # ... and the trainer's own log history (what wandb or tensorboard get).
    history = [
        h["verifier/timeouts"] for h in trainer.state.log_history if "verifier/timeouts" in h
    ]
    assert history == [r["verifier/timeouts"] for r in rows]
