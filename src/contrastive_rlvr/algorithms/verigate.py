"""VeriGate: verifier-gated step-level advantages ("Verifier-Gated Step-Level GRPO", 2026).

Only the paper's abstract is public; the formulas here are our reading of it
(see ``docs/token-methods.md``). Per group of G completions:

- if the verifier (outcome) rewards differ, every token of completion i gets
  the usual outcome advantage ``A_i`` (:func:`group_advantages`, or any per-row
  advantages the caller passes, e.g. RCC-corrected ones);
- if they are all equal (the group would give no gradient), the group is
  *gated* to process scores: completion i is split into steps
  (:func:`split_steps`), a process scorer gives step j a score ``p_ij``, and
  by default (``process_norm="steps"``) the advantages follow DeepSeekMath's
  process supervision (arXiv:2402.03300, Sec. 4.1.3): normalise the step
  scores over the group, then give each step the sum of the normalised scores
  of that step and the steps after it,

      A_ij = sum_{j' >= j} (p_ij' - mean_g p) / (std_g p + eps)

  with mean and (Bessel) std over *all* steps of *all* completions of the
  group; every token of step j gets ``A_ij``. A group whose steps are all
  right (all scores equal) gets exactly 0, whatever its completions' lengths.

  ``process_norm="cumulated"`` reverses the order: future-cumulate first,
  ``C_ij = sum_{j' >= j} p_ij'``, then normalise,
  ``A_ij = (C_ij - mean_g C) / (std_g C + eps)``. It is the literal reading of
  the abstract ("normalise them over the group"), but ``C`` grows with the
  number of steps left, so an all-right group gets advantages that fall along
  each completion and favour longer chains (seven 3-step and one 4-step
  completion, all steps right, without std: ``(.92, -.08, -1.08)`` and
  ``(1.92, .92, -.08, -1.08)``). Kept as an option (``docs/token-methods.md``).

Shapes: ``B`` rows laid out group by group, ``T`` completion tokens, ``G``
group size; the step index of each token is a (B, T) long tensor, -1 on
padding and on tokens that belong to no step.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Literal, Protocol, get_args

import torch

from .advantages import DEFAULT_EPS, group_advantages
from .dapo import informative_groups
from .ops import Tensor, check_rows, check_same_shape, group_view, num_groups, per_token

# The built-in exact scorer lives in its own module; importable from here too.
from .step_checker import ArithmeticStepScorer as ArithmeticStepScorer

StepRule = Literal["lines", "chain", "regex"]
STEP_RULES: tuple[str, ...] = get_args(StepRule)
ProcessNorm = Literal["steps", "cumulated"]
PROCESS_NORMS: tuple[str, ...] = get_args(ProcessNorm)
#: DeepSeekMath's order (normalise the step scores, then cumulate): an all-right
#: group gets zero advantages (module docstring).
DEFAULT_PROCESS_NORM: ProcessNorm = "steps"

# A group whose token advantages are all within this of 0 gives no gradient:
# it counts as collapsed in the metrics.
COLLAPSE_TOL = 1e-8

Span = tuple[int, int]


# ----------------------------------------------------------------------------- steps


def split_steps(text: str, rule: StepRule = "lines", *, pattern: str | None = None) -> list[Span]:
    """Character spans ``[start, end)`` of the reasoning steps of ``text``.

    Rules:

    - ``"lines"``: each line that is not blank is a step; its span is the line
      without surrounding whitespace (and without the newline).
    - ``"chain"``: pieces separated by ``,`` or newlines, blank pieces skipped,
      surrounding whitespace excluded: the worked chains of the arithmetic task
      (``14+3=17,17+2=19`` has two steps).
    - ``"regex"``: each non-empty match of ``pattern`` is a step (e.g.
      ``r"[^.\\n]+\\.?"`` for sentences).

    Text between steps (newlines, separators) is in no span;
    :func:`step_of_tokens` gives it to the step before it.
    """
    if rule == "regex":
        if not pattern:
            raise ValueError("split_steps: rule='regex' needs a pattern")
        return [m.span() for m in re.finditer(pattern, text) if m.end() > m.start()]
    if pattern is not None:
        raise ValueError(f"split_steps: pattern is only used with rule='regex', got rule={rule!r}")
    if rule == "lines":
        piece = r"[^\n]+"
    elif rule == "chain":
        piece = r"[^,\n]+"
    else:
        raise ValueError(f"unknown step rule {rule!r}; valid: {', '.join(STEP_RULES)}")
    spans = []
    for m in re.finditer(piece, text):
        stripped = m.group().strip()
        if stripped:
            start = m.start() + m.group().index(stripped)
            spans.append((start, start + len(stripped)))
    return spans


def token_offsets(pieces: Sequence[str]) -> list[Span]:
    """Character offsets of tokens given their decoded texts, which must concatenate
    to the completion text (true for a character tokenizer, and for byte-level BPE
    decoding one token at a time when no token splits a character)."""
    offsets, start = [], 0
    for piece in pieces:
        offsets.append((start, start + len(piece)))
        start += len(piece)
    return offsets


def step_of_tokens(spans: Sequence[Span], offsets: Sequence[Span]) -> list[int]:
    """The step of each token of one completion, -1 where the completion has no step.

    A token belongs to the step that holds its last character; characters
    between two steps belong to the earlier one, characters before the first
    step to the first. A zero-width token (a special token such as EOS, whose
    offsets are often ``(0, 0)``) takes the step of the token before it.
    """
    if not spans:
        return [-1] * len(offsets)
    starts = [s for s, _ in spans]
    if starts != sorted(starts):
        raise ValueError(f"step spans must be in text order, got {list(spans)}")
    out: list[int] = []
    for start, end in offsets:
        if end <= start:
            out.append(out[-1] if out else 0)
        else:
            out.append(max(bisect.bisect_right(starts, end - 1) - 1, 0))
    return out


def token_step_index(
    spans: Sequence[Sequence[Span]], offsets: Sequence[Sequence[Span]], mask: Tensor
) -> Tensor:
    """Per-token step index of a batch, (B, T) long, -1 on padding.

    Args:
        spans: per row, the step spans of its completion (:func:`split_steps`).
        offsets: per row, the character offsets of its completion tokens, one
            per mask-1 cell in order (so left and right padding both work).
        mask: (B, T), 1 on completion tokens.
    """
    if len(spans) != mask.shape[0] or len(offsets) != mask.shape[0]:
        raise ValueError(
            f"token_step_index: {len(spans)} span lists and {len(offsets)} offset lists "
            f"for {mask.shape[0]} rows"
        )
    index = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
    real = mask.bool()
    for i, (row_spans, row_offsets) in enumerate(zip(spans, offsets, strict=True)):
        n_tokens = int(real[i].sum())
        if len(row_offsets) != n_tokens:
            raise ValueError(
                f"token_step_index: row {i} has {n_tokens} completion tokens in the mask "
                f"but {len(row_offsets)} offsets"
            )
        steps = torch.tensor(step_of_tokens(row_spans, row_offsets), dtype=torch.long)
        index[i, real[i]] = steps.to(mask.device)
    return index


# ----------------------------------------------------------------------------- scorers


class ProcessScorer(Protocol):
    """A process scorer: ``(prompt, steps) -> one score per step``.

    Scores are floats, higher is better (a probability that the step is
    right, or 1/0 from an exact checker).
    """

    def __call__(self, prompt: str, steps: Sequence[str]) -> list[float]: ...


def score_steps(
    scorer: ProcessScorer,
    prompt: str,
    completion: str,
    rule: StepRule = "lines",
    *,
    pattern: str | None = None,
) -> tuple[list[Span], list[float]]:
    """Split ``completion`` into steps and score them: ``(spans, scores)``."""
    spans = split_steps(completion, rule, pattern=pattern)
    scores = [float(s) for s in scorer(prompt, [completion[a:b] for a, b in spans])]
    if len(scores) != len(spans):
        raise ValueError(
            f"process scorer {type(scorer).__name__} returned {len(scores)} scores "
            f"for {len(spans)} steps"
        )
    return spans, scores


# ----------------------------------------------------------------------------- advantages


def future_cumulated(step_scores: Sequence[float] | Tensor) -> Tensor:
    """Future-cumulated rewards ``C_j = sum_{j' >= j} p_j'`` along the last dim.

    Args:
        step_scores: (S,) scores of one completion's steps, or (..., S) with
            trailing zero padding (padding adds nothing to earlier steps).
    Returns:
        a tensor of the same shape.
    """
    if isinstance(step_scores, Tensor):
        p = step_scores if step_scores.is_floating_point() else step_scores.float()
    else:
        p = torch.tensor([float(x) for x in step_scores])
    return p.flip(-1).cumsum(-1).flip(-1)


def _padded_scores(
    step_scores: Sequence[Sequence[float] | None], need: Tensor, dtype: torch.dtype, device
) -> tuple[Tensor, Tensor]:
    """Scores padded to (B, S) and their step mask; rows not in ``need`` are left empty."""
    needed = need.tolist()
    for i, (row, n) in enumerate(zip(step_scores, needed, strict=True)):
        if n and row is None:
            raise ValueError(
                f"verigate: row {i} is in a group whose rewards are all equal, so it needs "
                "step scores, got None"
            )
    width = max([len(s) for s, n in zip(step_scores, needed, strict=True) if n] + [1])
    scores = torch.zeros((len(step_scores), width), dtype=dtype, device=device)
    smask = torch.zeros_like(scores, dtype=torch.bool)
    for i, (row, n) in enumerate(zip(step_scores, needed, strict=True)):
        if not n:
            continue
        scores[i, : len(row)] = torch.as_tensor(list(row), dtype=dtype)
        smask[i, : len(row)] = True
    return scores, smask


def _group_normalise(
    x: Tensor, smask: Tensor, group_size: int, *, scale_by_std: bool, eps: float
) -> Tensor:
    """``(x - mean_g) / (std_g + eps)`` over the masked cells of each group's rows, (B, S).

    Mean and Bessel std are over all masked cells of the group (all steps of
    all its completions); a group whose cells are all equal (or that has a
    single cell) gives exactly 0.
    """
    n, width = x.shape[0] // group_size, x.shape[1]
    xg, mg = x.reshape(n, group_size * width), smask.reshape(n, group_size * width)
    count = mg.sum(1, keepdim=True)
    mean = torch.where(mg, xg, 0).sum(1, keepdim=True) / count.clamp(min=1)
    centered = torch.where(mg, xg - mean, 0)
    hi = torch.where(mg, xg, -torch.inf).amax(1, keepdim=True)
    lo = torch.where(mg, xg, torch.inf).amin(1, keepdim=True)
    equal = ~(hi > lo)
    centered = torch.where(equal, 0, centered)
    if scale_by_std:
        var = centered.pow(2).sum(1, keepdim=True) / (count - 1).clamp(min=1)
        std = torch.where(equal, 1, var.sqrt())
        centered = centered / (std + eps)
    return centered.reshape(x.shape[0], width)


def process_advantages(
    step_scores: Tensor,
    step_mask: Tensor,
    group_size: int,
    *,
    process_norm: ProcessNorm = DEFAULT_PROCESS_NORM,
    scale_by_std: bool = True,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Group-normalised process advantages ``A_ij`` of every step (module docstring).

    Args:
        step_scores: (B, S) step scores ``p_ij``, padded.
        step_mask: (B, S) bool, True on real steps (a prefix of each row).
        process_norm: ``"steps"`` (normalise ``p_ij`` over the group, then
            cumulate: DeepSeekMath, the default) or ``"cumulated"`` (cumulate,
            then normalise ``C_ij``).
    Returns:
        (B, S) advantages, 0 on padded steps.
    """
    check_same_shape(step_scores=step_scores, step_mask=step_mask)
    step_mask = step_mask.bool()
    p = torch.where(step_mask, step_scores, 0)
    if process_norm == "steps":
        norm = _group_normalise(p, step_mask, group_size, scale_by_std=scale_by_std, eps=eps)
        adv = future_cumulated(norm)  # padded steps are 0: they add nothing
    elif process_norm == "cumulated":
        adv = _group_normalise(
            future_cumulated(p), step_mask, group_size, scale_by_std=scale_by_std, eps=eps
        )
    else:
        raise ValueError(f"unknown process_norm {process_norm!r}; valid: {PROCESS_NORMS}")
    return torch.where(step_mask, adv, 0)


def _collapsed_groups(adv: Tensor, mask: Tensor, group_size: int) -> Tensor:
    """(B/G,) bool: groups whose token advantages are all within COLLAPSE_TOL of 0."""
    row_max = torch.where(mask.bool(), adv.abs(), 0).amax(dim=1)
    return group_view(row_max, group_size).amax(dim=1) <= COLLAPSE_TOL


def verigate_advantages(
    rewards: Tensor,
    group_size: int,
    step_scores: Sequence[Sequence[float] | None],
    token_step_index: Tensor,
    mask: Tensor,
    *,
    outcome: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = DEFAULT_EPS,
    process_norm: ProcessNorm = DEFAULT_PROCESS_NORM,
) -> tuple[Tensor, dict[str, Tensor]]:
    """VeriGate token-level advantages (B, T): outcome where rewards differ, process where not.

    Args:
        rewards: (B,) verifier rewards.
        group_size: G >= 2.
        step_scores: per row, the process scores of its steps; may be None for
            rows whose group's rewards differ (they are not used there, so the
            caller can score only the gated groups, see :func:`gated_groups`).
        token_step_index: (B, T) long, the step of each token
            (:func:`token_step_index`), -1 for no step; tokens with -1 in a
            gated group get advantage 0.
        mask: (B, T), 1 on completion tokens.
        outcome: (B,) per-row outcome advantages to use where rewards differ;
            default ``group_advantages(rewards, G, scale_by_std, eps)``.
        scale_by_std, eps: for the outcome default and the process normalisation.
        process_norm: see :func:`process_advantages`.
    Returns:
        ``(advantages, metrics)``, advantages (B, T) with 0 on padding. Metrics:
        ``verigate/gated_frac`` (share of groups whose rewards are all equal,
        i.e. gated to process scores), ``verigate/collapse_rate_outcome``
        (share of groups whose outcome-only token advantages are all ~0: the
        collapse rate without the gate), ``verigate/collapse_rate`` (the same
        share with the gate).
    """
    n_rows = rewards.shape[0]
    num_groups(n_rows, group_size, min_size=2, what="verigate_advantages")
    check_same_shape(token_step_index=token_step_index, mask=mask)
    if mask.shape[0] != n_rows or len(step_scores) != n_rows:
        raise ValueError(
            f"verigate_advantages: {n_rows} rewards, {mask.shape[0]} mask rows and "
            f"{len(step_scores)} step-score lists must agree"
        )
    if outcome is None:
        outcome = group_advantages(rewards, group_size, scale_by_std=scale_by_std, eps=eps)
    check_rows("outcome", outcome, n_rows)
    real = mask.bool()
    outcome_tok = torch.where(real, per_token(outcome, mask), 0)  # (B, T)

    gated = gated_groups(rewards, group_size)  # (B/G,)
    gated_rows = gated.repeat_interleave(group_size)  # (B,)
    scores, smask = _padded_scores(step_scores, gated_rows, outcome.dtype, outcome.device)
    too_far = (token_step_index >= smask.sum(1, keepdim=True)) & real & gated_rows.unsqueeze(1)
    if bool(too_far.any()):
        row = int(too_far.any(1).nonzero()[0])
        raise ValueError(
            f"verigate: row {row} has tokens of step {int(token_step_index[row].max())} "
            f"but only {int(smask[row].sum())} step scores"
        )
    step_adv = process_advantages(
        scores, smask, group_size, process_norm=process_norm, scale_by_std=scale_by_std, eps=eps
    )  # (B, S)
    # Rows outside gated groups may index past the padded width: clamp, then discard.
    index = token_step_index.long().clamp(0, step_adv.shape[1] - 1)
    process_tok = step_adv.gather(1, index)  # (B, T)
    process_tok = torch.where(real & (token_step_index >= 0), process_tok, 0)
    adv = torch.where(gated_rows.unsqueeze(1), process_tok, outcome_tok)
    metrics = {
        "verigate/gated_frac": gated.float().mean(),
        "verigate/collapse_rate_outcome": _collapsed_groups(outcome_tok, mask, group_size)
        .float()
        .mean(),
        "verigate/collapse_rate": _collapsed_groups(adv, mask, group_size).float().mean(),
    }
    return adv, {k: v.detach() for k, v in metrics.items()}


def gated_groups(rewards: Tensor, group_size: int) -> Tensor:
    """(B/G,) bool: groups whose verifier rewards are all equal (VeriGate's process path).

    The trainer scores steps only for the rows of these groups.
    """
    return ~informative_groups(rewards, group_size)
