"""An optional format reward: 1.0 when a completion states its answer in the expected form.

Styles:

- ``boxed``: a complete ``\\boxed{...}`` (balanced braces) somewhere in the completion.
- ``answer_tag``: a closed ``<answer>...</answer>`` with non-empty content.
- ``think_answer``: the whole completion is ``<think>...</think>`` followed by
  ``<answer>...</answer>`` (whitespace around allowed), the R1-style layout.

Typically combined with a correctness reward at a small weight (TRL's
``reward_weights``), so that a model learns to state an answer the verifier
can read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from .extract import answer_tag, completion_text, last_boxed

FormatStyle = Literal["boxed", "answer_tag", "think_answer"]
FORMAT_STYLES: tuple[str, ...] = get_args(FormatStyle)
_THINK_ANSWER = re.compile(r"\s*<think>.*?</think>\s*<answer>(.+?)</answer>\s*", re.DOTALL)


def has_format(text: str, style: FormatStyle) -> bool:
    """Whether ``text`` follows ``style`` (see the module docstring)."""
    if style == "boxed":
        return bool(last_boxed(text))
    if style == "answer_tag":
        return "</answer>" in text and bool(answer_tag(text))
    if style == "think_answer":
        m = _THINK_ANSWER.fullmatch(text)
        return m is not None and bool(m.group(1).strip())
    raise ValueError(f"unknown format style {style!r}; choose one of {FORMAT_STYLES}")


class FormatReward:
    """TRL reward function: 1.0 if the completion has the format ``style``, else 0.0."""

    def __init__(self, style: FormatStyle = "boxed") -> None:
        if style not in FORMAT_STYLES:
            raise ValueError(f"unknown format style {style!r}; choose one of {FORMAT_STYLES}")
        self.style = style
        self.__name__ = f"format_{style}"

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[str | Sequence[Mapping[str, Any]]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if completions is None:
            raise ValueError("FormatReward needs completions=[...]")
        return [float(has_format(completion_text(c), self.style)) for c in completions]
