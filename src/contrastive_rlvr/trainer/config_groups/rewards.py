"""Reward options: the reward functions, how math_verify reads an answer, which reward
scores the held-out avg@n, and what a run does with rewards that tell nothing or are not
finite (docs/reliability.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...method_options import check, check_choices
from ...rewards.extract import AnswerReading


@dataclass
class RewardOptions:
    """The rewards and the reading of a completion's answer."""

    help_group: ClassVar[str] = "Rewards and answer reading"

    rewards: list[str] = field(
        default_factory=lambda: ["math_verify"],
        metadata={
            "help": "Reward functions for a custom dataset: built-in names (math_verify, "
            "format, gym) or import paths 'pkg.module:fn' / 'file.py:fn'."
        },
    )
    answer_line: bool = field(
        default=AnswerReading.answer_line,
        metadata={
            "help": "math_verify reward: read a last 'Answer: X' line when a completion has no "
            "<answer> tag and no \\boxed{} (as eval's --answer-line; README, Rewards)."
        },
    )
    answer_phrase: bool = field(
        default=AnswerReading.answer_phrase,
        metadata={
            "help": "math_verify reward: then read the last 'the answer is X' of the prose "
            "('So, the final answer is 4.'), as eval's --answer-phrase."
        },
    )
    last_number_fallback: bool = field(
        default=AnswerReading.last_number_fallback,
        metadata={
            "help": "math_verify reward: then score the completion's last number (GSM8K-style "
            "prose), as eval's --last-number-fallback."
        },
    )
    heldout_reward: str | None = field(
        default=None,
        metadata={
            "help": "Which of rewards scores the held-out avg@n before and after RL (its name "
            "as given in rewards). Default: the only one; with several, math_verify when it "
            "is among them, else the first that is not 'format' (named in the log and "
            "summary.json)."
        },
    )
    no_learning_signal: Literal["warn", "error"] = field(
        default="warn",
        metadata={
            "help": "A run whose rewards never told completions apart (every group's rewards "
            "equal at every step) or whose gradient was 0 at every step: 'warn' ends with "
            "a summary that says so (learning_signal in summary.json); 'error' makes it an "
            "error (exit 1), as a run whose every reward was None is."
        },
    )
    nonfinite_rewards: Literal["error", "skip_group"] = field(
        default="error",
        metadata={
            "help": "A reward function returning NaN or +-inf: 'error' stops the run naming the "
            "function and the row; 'skip_group' gives every row of that row's group no "
            "advantage and no gradient, counted as reward/skipped_groups."
        },
    )
    reward_timeout: float = field(
        default=600.0,
        metadata={
            "help": "Seconds one call of a reward function (one batch of completions) may "
            "take; past it the run stops with an error naming the function. 0: no limit. "
            "math_verify is not timed again: it checks each answer under its own deadline."
        },
    )

    def validate_rewards(self) -> None:
        check_choices(self, RewardOptions)  # no_learning_signal, nonfinite_rewards
        check(
            self.heldout_reward is None or self.heldout_reward in self.rewards,
            "heldout_reward",
            self.heldout_reward,
            f"name one of rewards={self.rewards}",
        )
        check(
            math.isfinite(self.reward_timeout) and self.reward_timeout >= 0,
            "reward_timeout",
            self.reward_timeout,
            "must be a number of seconds >= 0 (0: no limit)",
        )
