"""Text-side inputs of the token-level methods for the trainer: VeriGate's step scores, ReCo's
response keys and OC-GRPO's guided prompts (formulas in ``docs/token-methods.md``).

The tensor math is in :mod:`contrastive_rlvr.algorithms`; this module turns the
trainer's token ids and dataset rows into what those functions take.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..algorithms import (
    ArithmeticStepScorer,
    ProcessScorer,
    guided_prompt,
    hint_prefix,
    score_steps,
    token_offsets,
    token_step_index,
)
from ..algorithms.verigate import Span
from ..rewards.extract import extract_answer
from ..rewards.loading import load_reward_function
from .stages.process_scorers import PRMScorer


def build_process_scorer(spec: str) -> ProcessScorer:
    """VeriGate's scorer from the ``verigate_scorer`` setting: ``"arithmetic"`` (the exact
    step checker), a local PRM directory, or ``module:function`` / ``file.py:function``."""
    if spec == "arithmetic":
        return ArithmeticStepScorer()
    if Path(spec).is_dir():
        return PRMScorer(spec)
    try:
        fn = load_reward_function(spec)
    except ValueError as e:
        raise ValueError(f"verigate_scorer={spec!r}: {e}") from e
    return PRMScorer(fn)


def step_scores_and_index(
    scorer: ProcessScorer,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    needed: Sequence[bool],
    mask: torch.Tensor,
    *,
    rule: str,
    pattern: str | None = None,
) -> tuple[list[list[float] | None], torch.Tensor]:
    """Step scores of the rows in ``needed`` and the (B, T) step index of every token.

    Each token is decoded on its own (special tokens as ``""``, so EOS is a
    zero-width token that joins the last step); the completion text is the
    concatenation, which keeps token offsets exact for character and
    byte-level tokenizers. Rows not needed get ``None`` and index -1.

    Args:
        prompts, completions: per row, unpadded token ids.
        needed: per row, whether its group is gated.
        mask: (B, T) completion mask (one mask-1 cell per completion token).
    """
    scores: list[list[float] | None] = []
    spans: list[list[Span]] = []
    offsets: list[list[Span]] = []
    for prompt_ids, ids, need in zip(prompts, completions, needed, strict=True):
        if not need:
            scores.append(None)
            spans.append([])
            offsets.append([(0, 0)] * len(ids))
            continue
        pieces = [tokenizer.decode([t], skip_special_tokens=True) for t in ids]
        prompt = tokenizer.decode(list(prompt_ids), skip_special_tokens=True)
        row_spans, row_scores = score_steps(scorer, prompt, "".join(pieces), rule, pattern=pattern)
        scores.append(row_scores)
        spans.append(row_spans)
        offsets.append(token_offsets(pieces))
    return scores, token_step_index(spans, offsets, mask)


def response_keys(
    completions: Sequence[Sequence[int]], texts: Sequence[str] | None, identity: str
) -> list[Hashable]:
    """ReCo's identity of each response: its token ids (``"tokens"``), or its final answer
    (``"answer"``: :func:`~contrastive_rlvr.rewards.extract_answer` with the last-number
    fallback; a completion stating no answer keeps its token ids as its key)."""
    if identity == "tokens":
        return [("tokens", tuple(ids)) for ids in completions]
    if identity != "answer" or texts is None:
        raise ValueError(f"reco_identity={identity!r}: 'answer' needs the texts; valid: tokens")
    keys: list[Hashable] = []
    for ids, text in zip(completions, texts, strict=True):
        answer = extract_answer(text, last_number_fallback=True)
        keys.append(("tokens", tuple(ids)) if answer is None else ("answer", answer.strip()))
    return keys


def _with_hint(prompt: Any, hint: str, template: str) -> Any:
    """A plain-text prompt, or the last message of a conversation, with the hint."""
    if isinstance(prompt, str):
        return guided_prompt(prompt, hint, template=template)
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1].get("content"), str):
        content = guided_prompt(prompt[-1]["content"], hint, template=template)
        last = {**prompt[-1], "content": content}
        return [*prompt[:-1], last]
    raise ValueError(
        f"oc_grpo: cannot put a hint into prompt {prompt!r}: expected a string or a message "
        "list whose last message has string content"
    )


def guided_rows(
    rows: Sequence[dict[str, Any]],
    *,
    column: str,
    fraction: float,
    unit: str,
    template: str,
) -> list[dict[str, Any]]:
    """Copies of dataset rows whose prompt carries the hint: the first ``fraction`` of the
    reference solution in ``column`` (:func:`hint_prefix`, :func:`guided_prompt`)."""
    out = []
    for i, row in enumerate(rows):
        solution = row.get(column)
        if not isinstance(solution, str):
            raise ValueError(
                f"oc_grpo: row {i} has no reference solution in column {column!r} "
                f"(got {solution!r}); set oc_solution_column"
            )
        hint = hint_prefix(solution, fraction, unit=unit)
        out.append({**row, "prompt": _with_hint(row["prompt"], hint, template)})
    return out
