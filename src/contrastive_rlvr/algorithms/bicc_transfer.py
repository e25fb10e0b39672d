"""BiCC's route to the sampling policy: the self-distillation term of ``bicc_form: distill``
and the transfer measure every BiCC run logs (docs/bicc.md, "Does BiCC reach the policy
that samples?").

The paper's objective trains ``pi_theta(. | [q ; O_opp])`` only; the policy that samples,
``pi_theta(. | q)``, improves only through whatever the shared weights carry over.
:func:`transfer_cosine` measures that carry-over as the cosine between the gradient a run
applies and plain GRPO's gradient on the plain prompt. :func:`sampled_token_distill_loss`
is the other route (on-policy self-distillation: OPSD arXiv 2601.18734, SDPO arXiv
2601.20802): the conditioned model is a stop-gradient teacher and the gradient flows
through the plain prompt, on the sampled tokens. Pure torch; shapes ``(B, T)`` for
per-token tensors, ``(B,)`` for rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch

logger = logging.getLogger(__name__)

#: Probes in a row below the threshold before a run warns (:class:`TransferWatch`).
PATIENCE = 3

#: log-ratio bound of the importance weight, as TRL's SDPO clamps it (exp(20) is finite).
_LOG_RATIO_BOUND = 20.0


def sampled_token_distill_loss(
    logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    taught: torch.Tensor,
    *,
    old_logp: torch.Tensor | None = None,
    is_clip: float | None = None,
    max_gap: float | None = None,
    center: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Reverse KL from the student to the teacher, estimated on the sampled tokens.

    Per token ``l_t = sg(log pi_s(o_t) - log pi_T(o_t)) * log pi_s(o_t)``: its gradient is
    the sampled-token estimate of ``grad KL(pi_s || pi_T)`` (the score-function term; the
    ``E[grad log pi_s]`` term is 0 in expectation), i.e. a policy gradient whose per-token
    advantage is ``log pi_T - log pi_s``: tokens the teacher likes more than the student
    are pushed up. With ``is_clip`` the term is weighted by ``min(pi_s / pi_old, is_clip)``
    (detached; 1 on policy), as TRL's SDPO does off policy. ``max_gap`` bounds
    ``|log pi_s - log pi_T|`` per token (this project's option: one token the teacher
    finds impossible would otherwise dominate the update). Aggregation as SDPO's: the
    mean over a row's taught tokens, then the mean over all ``B`` rows (an untaught row
    counts 0). With ``center`` (this project's option) each row's mean gap over its tokens
    is subtracted first: a context that shifts every token of the row alike (a teacher
    that finds the whole conditioned input unfamiliar) then teaches nothing, and only
    which tokens the teacher prefers within the row remains.

    Args:
        logp: (B, T) ``log pi_theta(o_t | q)``, with gradient (the student, plain prompt).
        teacher_logp: (B, T) the teacher's log-probs of the same tokens (no gradient is
            taken through it), e.g. ``log pi(o_t | [q ; O_opp])``.
        mask: (B, T) 1 on completion tokens.
        taught: (B,) 1 for rows the teacher teaches (bool or float).
        old_logp: (B, T) ``log pi_old`` of the importance weight (``is_clip`` only).
        is_clip: upper bound of the importance weight; None: no weight.
        max_gap: bound of the per-token log-ratio; None: unbounded.
        center: subtract each row's mean gap (over ``mask``) from its tokens' gaps.

    Returns:
        The scalar loss and metrics: ``distill_gap`` (mean ``log pi_T - log pi_s`` over
        the taught tokens: above 0, the teacher finds the sampled tokens likelier).
    """
    gap = (logp - teacher_logp).detach()
    if center:
        weights = mask.to(gap.dtype)
        row_mean = (gap * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp(min=1)
        gap = gap - row_mean
    if max_gap is not None:
        gap = gap.clamp(-max_gap, max_gap)
    per_token = gap * logp
    if is_clip is not None and old_logp is not None:
        log_ratio = (logp - old_logp).detach().clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
        per_token = per_token * log_ratio.exp().clamp(max=is_clip)
    loss_mask = mask.to(logp.dtype) * taught.to(logp.dtype).unsqueeze(1)
    rows = (per_token * loss_mask).sum(1) / loss_mask.sum(1).clamp(min=1.0)
    tokens = loss_mask.sum().clamp(min=1.0)
    metrics = {"distill_gap": -((logp - teacher_logp).detach() * loss_mask).sum() / tokens}
    return rows.mean(), metrics


def taught_rows(
    rewards: torch.Tensor, conditioned: torch.Tensor, threshold: float, rows: str
) -> torch.Tensor:
    """(B,) bool: the rows the conditioned teacher teaches.

    ``rows="wrong"``: a wrong row, taught by the model that read its group's correct
    attempts (SDPO's direction: successful rollouts as feedback for failed ones);
    ``"both"``: every conditioned row (a correct one is taught by the model that read the
    wrong attempts). A row whose group has one outcome only has no context
    (``conditioned`` False) and is never taught.

    Args:
        rewards: (B,) total rewards.
        conditioned: (B,) bool, the row got a context.
        threshold: a reward above it is correct (BiCC's partition).
        rows: ``"wrong"`` or ``"both"``.
    """
    if rows == "both":
        return conditioned.bool()
    if rows == "wrong":
        return conditioned.bool() & ~(rewards > threshold)
    raise ValueError(f"rows must be 'wrong' or 'both', got {rows!r}")


def gradient_dots(
    applied: Sequence[torch.Tensor | None], plain: Sequence[torch.Tensor | None]
) -> torch.Tensor:
    """``(3,)`` float64 on the CPU: ``<a, p>``, ``|a|^2``, ``|p|^2`` of two gradients given
    per parameter (None: no gradient, counted 0). Sums over shards add up: a sharded
    model's ranks each take their shards' sums and all-reduce them before
    :func:`cosine_of_dots`."""
    dots = torch.zeros(3, dtype=torch.float64)
    for a, p in zip(applied, plain, strict=True):
        if a is not None:
            dots[1] += a.double().pow(2).sum().cpu()
        if p is not None:
            dots[2] += p.double().pow(2).sum().cpu()
        if a is not None and p is not None:
            dots[0] += (a.double() * p.double()).sum().cpu()
    return dots


def cosine_of_dots(dots: torch.Tensor) -> float:
    """The cosine from :func:`gradient_dots`' ``(3,)`` sums; NaN when either norm is 0."""
    dot, norm_a, norm_p = (float(x) for x in dots.tolist())
    if norm_a == 0 or norm_p == 0:
        return float("nan")
    return dot / (math.sqrt(norm_a) * math.sqrt(norm_p))


def transfer_cosine(
    applied: Sequence[torch.Tensor | None], plain: Sequence[torch.Tensor | None]
) -> float:
    """Cosine between two gradients given per parameter (None: no gradient, counted 0).

    ``applied``: the gradient of the loss the run applies; ``plain``: plain GRPO's on the
    plain prompt, same batch and advantages. 1: the update moves the sampling policy as
    GRPO would; about 0: in a direction unrelated to the reward. NaN when either
    gradient is 0 (nothing to compare)."""
    return cosine_of_dots(gradient_dots(applied, plain))


def probe_due(step: int, every: int) -> bool:
    """Whether optimizer step ``step`` (0 for the first) is probed: the first and every
    ``every``-th after it; never with ``every`` 0 (``bicc_transfer_every``)."""
    return every > 0 and (step == 0 or step % every == 0)


class TransferWatch:
    """The values of ``bicc/transfer_cos`` a run logged, and its one warning: after
    :data:`PATIENCE` probes in a row below ``threshold`` (NaN probes neither count nor
    reset), it logs ``advice`` once, with the last values. Both engines' probes record
    here, each with its own option names in ``advice``."""

    def __init__(self, threshold: float, advice: str) -> None:
        self.threshold, self.advice = threshold, advice
        self.values: list[float] = []
        self._low, self.warned = 0, False

    def record(self, value: float) -> None:
        """Keep ``value``; warn (once) when the last :data:`PATIENCE` were low."""
        self.values.append(value)
        if math.isnan(value):
            return
        self._low = self._low + 1 if value < self.threshold else 0
        if self._low >= PATIENCE and not self.warned:
            recent = ", ".join(f"{v:.2f}" for v in self.values[-PATIENCE:])
            logger.warning(
                "BiCC: the update is not reaching the policy that samples: bicc/transfer_cos "
                "(cosine with plain GRPO's gradient on the plain prompt) was %s over the last "
                "%d probes, below %.2f: %s (docs/bicc.md, 'Does BiCC reach the policy that "
                "samples?')",
                recent,
                PATIENCE,
                self.threshold,
                self.advice,
            )
            self.warned = True


def plain_grpo_surrogate(
    logp: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """Plain GRPO's on-policy surrogate, ``-mean_i A_i mean_t log pi(o_it | q)``: its
    gradient is GRPO's at ratio 1 (clipping inactive), the direction the transfer
    measure compares with. ``logp`` (B, T) on the plain prompt, ``mask`` (B, T),
    ``advantages`` (B,)."""
    mask = mask.to(logp.dtype)
    per_row = (logp * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    return -(advantages.to(logp.dtype) * per_row).mean()
