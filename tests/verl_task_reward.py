"""The embedded arithmetic task's reward as a verl custom reward function (for the tests).

``reward.custom_reward_function.path=tests/verl_task_reward.py``: the chain reward
the TRL path trains this task with (:func:`contrastive_rlvr.embedded.arithmetic_reward`),
in verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)`` form.
"""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """1.0 for a well-formed chain whose last result is ``ground_truth``, else 0.0."""
    from contrastive_rlvr.embedded.task import arithmetic_reward

    return float(arithmetic_reward([None], [solution_str], [str(ground_truth)])[0])
