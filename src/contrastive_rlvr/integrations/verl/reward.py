"""This package's math-verify reward as a verl custom reward function.

In a verl config::

    reward.custom_reward_function.path=pkg://contrastive_rlvr.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

verl's reward manager calls ``compute_score(data_source, solution_str,
ground_truth, extra_info)`` once per completion; the answer is extracted and
checked exactly as the TRL path's ``MathVerifyReward`` does (``<answer>``,
else ``\\boxed{}``, else the last ``Answer: X`` line that DAPO-Math-17k's prompts ask
for; math-verify with a hard timeout in a worker process). This
module imports neither verl nor math-verify itself.
"""

from __future__ import annotations

from typing import Any

from ...rewards import MathVerifyReward

_reward: MathVerifyReward | None = None


def _shared_reward() -> MathVerifyReward:
    """One verifier pool per process, started on first use (verl calls from its reward workers)."""
    global _reward
    if _reward is None:
        _reward = MathVerifyReward(workers=1)
    return _reward


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **reward_kwargs: Any,
) -> float:
    """1.0 when the completion's answer matches ``ground_truth`` under math-verify, else 0.0.

    ``data_source``, ``extra_info`` and ``reward_kwargs`` (verl's
    ``custom_reward_function.reward_kwargs``) are part of verl's call and not used.
    """
    return _shared_reward().score([solution_str], [ground_truth])[0].reward
