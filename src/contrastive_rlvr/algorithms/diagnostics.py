"""The math of the training diagnostics (documented in docs/metrics.md): the delta
statistics of a batch (Cov(R, delta), the delta of correct vs wrong completions, RCC's
baseline shift), a projected gradient-variance estimate, and the ratio margin of one update.

Pure torch on tensors; the trainer's batch stage and its diagnostics callback call these.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .advantages import DEFAULT_RCC_BOUND, group_covariance, rcc_baseline, sequence_delta
from .ops import Tensor, group_view


def delta_metrics(
    rewards: torch.Tensor,
    delta: torch.Tensor,
    group_size: int,
    *,
    threshold: float,
    rcc_coef: float | None,
    rcc_bound: str = DEFAULT_RCC_BOUND,
) -> dict[str, torch.Tensor]:
    """The delta diagnostics of rows (N,) in whole groups: ``rcc/cov`` (mean over groups of
    Cov(R, delta)), ``rcc/delta_mean``, ``rcc/delta_correct``, ``rcc/delta_wrong`` and, with
    ``rcc_coef``, ``rcc/baseline_shift`` = mean |b* - mean(R)|. Absent where undefined
    (groups of 1, no correct or no wrong row)."""
    g, correct = group_size, rewards > threshold
    delta = delta.to(rewards.dtype)
    out = {"rcc/delta_mean": delta.mean()}
    if g >= 2:  # evaluation may run groups of 1 (num_generations_eval=1): no covariance
        out["rcc/cov"] = group_covariance(rewards, delta, g).mean()
    if correct.any():
        out["rcc/delta_correct"] = delta[correct].mean()
    if (~correct).any():
        out["rcc/delta_wrong"] = delta[~correct].mean()
    if rcc_coef is not None and g >= 2:
        group_mean = group_view(rewards, g).mean(1).repeat_interleave(g)
        b = rcc_baseline(rewards, delta, g, coef=rcc_coef, bound=rcc_bound)
        out["rcc/baseline_shift"] = (b - group_mean).abs().mean()
    return out


def random_directions(
    params: Sequence[torch.nn.Parameter], num: int, seed: int
) -> list[list[Tensor]]:
    """``num`` random unit directions in parameter space, fixed by ``seed``.

    Each direction is a standard normal vector over all parameters, scaled to
    unit Euclidean norm (so it is uniform on the sphere of dimension P).

    Returns:
        ``num`` lists of tensors shaped like ``params``.
    """
    gen = torch.Generator().manual_seed(seed)
    directions = []
    for _ in range(num):
        parts = [torch.randn(p.shape, generator=gen, dtype=torch.float32) for p in params]
        norm = torch.sqrt(sum((x * x).sum() for x in parts))
        directions.append(
            [(x / norm).to(p.device, p.dtype) for x, p in zip(parts, params, strict=True)]
        )
    return directions


def projected_gradients(
    scores: Sequence[Tensor],
    params: Sequence[torch.nn.Parameter],
    directions: Sequence[Sequence[Tensor]],
) -> Tensor:
    """``u[i, k] = v_k . grad_theta s_i``: each score's gradient projected on each direction.

    Uses ``torch.autograd.grad``, so the parameters' ``.grad`` is left alone.

    Args:
        scores: B scalar tensors with a graph to ``params`` (one per row).
        params: the P-dimensional parameter list, in the order of each direction.
        directions: K directions from :func:`random_directions`.
    Returns:
        (B, K) projections.
    """
    out = torch.zeros(len(scores), len(directions))
    for i, score in enumerate(scores):
        grads = torch.autograd.grad(score, list(params), allow_unused=True)
        for k, direction in enumerate(directions):
            out[i, k] = sum(
                (g.float() * v.float()).sum()
                for g, v in zip(grads, direction, strict=True)
                if g is not None
            )
    return out


def group_gradient_variance(advantages: Tensor, projections: Tensor, group_size: int) -> Tensor:
    """Variance across groups of the projected policy-gradient contributions.

    ``c[g, k] = sum_{i in g} A_i * u[i, k]`` is group g's contribution to
    ``sum_i A_i grad s_i`` (the on-policy policy gradient up to the factor
    -1/B) projected on direction k; the estimate is
    ``mean_k Var_g(c[:, k])`` with the unbiased variance (divide by
    n_groups - 1). With unit directions uniform on the sphere its expectation
    is ``tr(Cov_g(c_g)) / P``.

    Args:
        advantages: (B,). projections: (B, K) from :func:`projected_gradients`.
    Returns:
        0-dim tensor.
    """
    if projections.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"projections has {projections.shape[0]} rows but advantages has {advantages.shape[0]}"
        )
    if advantages.shape[0] % group_size or advantages.shape[0] // group_size < 2:
        raise ValueError(
            f"group_gradient_variance needs at least 2 whole groups of {group_size} rows, "
            f"got {advantages.shape[0]} rows"
        )
    weighted = advantages.to(projections.dtype).unsqueeze(1) * projections  # (B, K)
    contributions = weighted.view(-1, group_size, projections.shape[1]).sum(1)  # (B/G, K)
    return contributions.var(dim=0, unbiased=True).mean()


def ratio_margin(
    logp_after: Tensor, logp_before: Tensor, mask: Tensor, correct: Tensor
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Mean sequence ratio of the correct minus that of the wrong completions.

    ``r_i = exp(mean_t(logp_after - logp_before))`` (the GSPO-style sequence
    ratio of one update); returns ``(mean_correct r - mean_wrong r,
    mean_correct r, mean_wrong r)``, or None when one side is empty.

    Args:
        logp_after, logp_before, mask: (B, T). correct: (B,) bool.
    """
    if not correct.any() or correct.all():
        return None
    ratio = torch.exp(sequence_delta(logp_after, logp_before, mask, reduce="mean"))
    pos, neg = ratio[correct].mean(), ratio[~correct].mean()
    return pos - neg, pos, neg


def collapse_reasons(rewards: Tensor, group_size: int, threshold: float) -> dict[str, Tensor]:
    """Of the groups of rows (N,) whose rewards are all equal (no advantage, no gradient),
    the share of all groups that are so because every row is wrong (reward <=
    ``threshold``, e.g. all 0: ``adv/collapse_wrong_rate``) and because every row is
    correct (e.g. all 1: ``adv/collapse_correct_rate``); 0-dim tensors."""
    groups = group_view(rewards, group_size)  # (N/G, G)
    high, low = groups.max(dim=1).values, groups.min(dim=1).values
    equal = high == low
    return {
        "adv/collapse_wrong_rate": (equal & (high <= threshold)).float().mean(),
        "adv/collapse_correct_rate": (equal & (low > threshold)).float().mean(),
    }
