"""Logs the verifier counters of a trainer's reward functions with every training step.

A timed-out, killed or crashed verifier scores the answer 0 and training
goes on, which is right, but a run whose verifier is in trouble must show
it: :class:`VerifierCountersCallback` puts the counters of every reward
function that has a ``counters()`` method (:meth:`.MathVerifyReward.counters`:
``verifier/timeouts``, ``verifier/killed``, ``verifier/crashed``,
``verifier/errors``, ``verifier/worker_restarts``, ``verifier/worker_crashes``,
``verifier/server_restarts``) into the step's logged metrics, so they reach
``metrics.jsonl``, ``trainer.state.log_history`` and every reporting
integration (wandb, tensorboard).

The values are cumulative counts since the reward was made (a rise between
two logged steps is trouble in between), summed over the reward functions
and, in a multi-process run, over the processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback


def reward_counters(rewards: Sequence[Any]) -> dict[str, float]:
    """The sum, key by key, of ``counters()`` over the rewards that have it ({} if none)."""
    totals: dict[str, float] = {}
    for reward in rewards:
        counters = getattr(reward, "counters", None)
        if not callable(counters):
            continue
        values: Mapping[str, float] = counters()
        for key, value in values.items():
            totals[key] = totals.get(key, 0.0) + float(value)
    return totals


class VerifierCountersCallback(TrainerCallback):
    """Adds the reward functions' verifier counters to each step's logged metrics.

    Register it on a built TRL ``GRPOTrainer`` (or :class:`~contrastive_rlvr.
    trainer.RLVRTrainer`)::

        trainer.add_callback(VerifierCountersCallback(trainer))

    How: ``on_step_end`` runs after each optimizer step and before that
    step's log; it stores each counter as the single value of
    ``trainer._metrics["train"][key]``, which ``GRPOTrainer.log`` averages
    (one value: itself) into the logs that every callback and
    ``log_history`` receive, then clears. So the numbers go through the
    trainer's own log, whatever order the callbacks run in. With
    ``logging_steps > 1`` the logged value is the count at the logged step,
    which, being cumulative, loses nothing.

    Args:
        trainer: the trainer; its ``reward_funcs`` are read unless ``rewards`` is given.
        rewards: the reward functions to read counters from (default: the trainer's).
    """

    def __init__(self, trainer: Any, rewards: Sequence[Any] | None = None) -> None:
        metrics = getattr(trainer, "_metrics", None)
        if not isinstance(metrics, Mapping) or "train" not in metrics:
            raise TypeError(
                "VerifierCountersCallback needs a TRL GRPOTrainer (it logs through the trainer's "
                f"_metrics), got {type(trainer).__name__}"
            )
        self.trainer = trainer
        self.rewards = list(rewards) if rewards is not None else list(trainer.reward_funcs)

    def current(self) -> dict[str, float]:
        """The counters now, summed over the rewards and, if several, the processes."""
        totals = reward_counters(self.rewards)
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1 and totals:
            import torch

            keys = sorted(totals)
            local = torch.tensor([totals[k] for k in keys], device=accelerator.device)
            summed = accelerator.reduce(local, reduction="sum").tolist()
            totals = dict(zip(keys, summed, strict=True))
        return totals

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.trainer._metrics["train"]
        for key, value in self.current().items():
            metrics[key] = [float(value)]  # replaced, not appended: a count, not a sample
        return control
