"""Reward functions with TRL's signature ``f(prompts, completions, **columns) -> list[float]``.

- :class:`MathVerifyReward`: math answer correctness (math-verify in a
  process pool with a hard per-answer timeout).
- :class:`GymReward` with :func:`load_gym_task`: reasoning-gym tasks, 0/1.
- :class:`FormatReward`: whether the answer is stated in a given format.
- :func:`resolve_reward`: a built-in by name or a user function by import path.
- :class:`VerifierCountersCallback`: logs ``MathVerifyReward.counters()``
  (``verifier/...``) with every training step.

Importing this package imports neither torch nor sympy; the verifier
workers import math-verify themselves.
"""

from .extract import (
    READING_FIELDS,
    AnswerReading,
    completion_text,
    extract_answer,
    last_boxed,
    last_number,
    normalize_answer,
    normalize_unicode,
)
from .format import FormatReward, has_format
from .loading import load_reward_function, resolve_reward
from .math_verify import COUNTER_KEYS, MathVerifyReward

__all__ = [
    "READING_FIELDS",
    "AnswerReading",
    "COUNTER_KEYS",
    "FormatReward",
    "GymReward",
    "MathVerifyReward",
    "VerifierCountersCallback",
    "completion_text",
    "extract_answer",
    "has_format",
    "last_boxed",
    "last_number",
    "load_gym_task",
    "load_reward_function",
    "normalize_answer",
    "normalize_unicode",
    "resolve_reward",
]


def __getattr__(name: str):
    # reasoning-gym and datasets take seconds to import: load them on first use.
    if name in ("GymReward", "load_gym_task"):
        from . import gym

        return getattr(gym, name)
    if name == "VerifierCountersCallback":  # imports transformers
        from .logging_callback import VerifierCountersCallback

        return VerifierCountersCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
