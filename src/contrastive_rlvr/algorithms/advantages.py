"""Group advantages (GRPO, Dr.GRPO) and the RCC-corrected baseline.

Papers: GRPO (DeepSeekMath, arXiv:2402.03300, Sec. 4.1.2); Dr.GRPO
(arXiv:2503.20783, Sec. 3.2: no std division); RCC ("When Right Meets Wrong:
Bilateral Context Conditioning with Reward-Confidence Correction for GRPO",
2026, the BiCC paper).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from .ops import (
    Tensor,
    check_rows,
    check_same_shape,
    group_view,
    masked_mean,
    masked_sum,
    num_groups,
)

DEFAULT_EPS = 1e-6
#: The advantages' eps of a training run on either engine: TRL's ``GRPOTrainer`` adds 1e-4
#: to the group std, so ``adv_eps`` (TRL path) and ``policy_loss.adv_eps`` (verl) default
#: to it and both engines' advantages are TRL's (docs/trl-parity.md).
TRL_ADV_EPS = 1e-4

RccBound = Literal["none", "reward_range"]
RCC_BOUNDS: tuple[str, ...] = get_args(RccBound)
#: How RCC's delta reduces ``logp - ref_logp`` over a completion's tokens.
DeltaReduction = Literal["mean", "sum"]
#: Default bound of the RCC baseline, chosen from the exact bandit variance study
#: (``benchmarks/rcc_variance.py``, ``docs/rcc.md``).
DEFAULT_RCC_BOUND: RccBound = "reward_range"


def as_float(rewards: Tensor) -> Tensor:
    """Integer or boolean rewards as float32 (a mean of integers is not defined in torch)."""
    return rewards if rewards.is_floating_point() else rewards.float()


def _centered_rewards(rewards: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """Per-group centred rewards (B/G, G) and an all-equal flag per group (B/G,).

    The centred value is forced to exactly 0 in groups whose rewards are all
    equal: ``R - mean(R)`` can be a rounding error away from 0 (e.g. three
    rewards of 0.1), and such a group must give no gradient at all.
    """
    r = group_view(rewards, group_size)
    equal = (r == r[:, :1]).all(dim=1)
    centered = r - r.mean(dim=1, keepdim=True)
    return torch.where(equal.unsqueeze(1), torch.zeros_like(centered), centered), equal


def _group_std(rewards: Tensor, group_size: int, equal: Tensor) -> Tensor:
    """Unbiased (Bessel) std of each group (B/G, 1), 1 in all-equal groups.

    An all-equal group's centred rewards are exactly 0; dividing them by 1
    keeps them 0 even with ``eps=0`` (0 / 0 would be NaN).
    """
    std = group_view(rewards, group_size).std(dim=1, unbiased=True, keepdim=True)
    return torch.where(equal.unsqueeze(1), torch.ones_like(std), std)


def group_advantages(
    rewards: Tensor, group_size: int, *, scale_by_std: bool = True, eps: float = DEFAULT_EPS
) -> Tensor:
    """GRPO / Dr.GRPO outcome advantage of every row.

    ``A_i = (R_i - mean_g R) / (std_g R + eps)`` with the unbiased (Bessel)
    std of the group, or ``A_i = R_i - mean_g R`` when ``scale_by_std=False``
    (Dr.GRPO). A group of equal rewards gives exactly 0.

    Args:
        rewards: (B,) scalar reward per completion.
        group_size: G, completions per prompt (>= 2).
    Returns:
        (B,) advantages.
    """
    num_groups(rewards.shape[0], group_size, min_size=2, what="group_advantages")
    rewards = as_float(rewards)
    centered, equal = _centered_rewards(rewards, group_size)
    if scale_by_std:
        centered = centered / (_group_std(rewards, group_size, equal) + eps)
    return centered.reshape(-1)


def sequence_delta(
    logp: Tensor, ref_logp: Tensor, mask: Tensor, *, reduce: DeltaReduction = "mean"
) -> Tensor:
    """Log-probability shift of each completion, ``delta_i`` of RCC.

    ``delta_i = mean_t (logp - ref_logp)`` over completion tokens (``reduce="mean"``)
    or the sum (``"sum"``: the log of the sequence probability ratio).

    Args:
        logp, ref_logp, mask: (B, T).
    Returns:
        (B,) delta per row.
    """
    check_same_shape(logp=logp, ref_logp=ref_logp, mask=mask)
    diff = logp - ref_logp
    if reduce == "mean":
        return masked_mean(diff, mask, dim=1)
    if reduce == "sum":
        return masked_sum(diff, mask, dim=1)
    raise ValueError(f"reduce must be 'mean' or 'sum', got {reduce!r}")


def group_covariance(x: Tensor, y: Tensor, group_size: int) -> Tensor:
    """Population covariance (divide by G) of ``x`` and ``y`` within each group.

    Args:
        x, y: (B,).
    Returns:
        (B/G,) one covariance per group.
    """
    check_same_shape(x=x, y=y)
    num_groups(x.shape[0], group_size, min_size=2, what="group_covariance")
    xg, yg = group_view(x, group_size), group_view(y, group_size)
    return ((xg - xg.mean(1, keepdim=True)) * (yg - yg.mean(1, keepdim=True))).mean(1)


def rcc_baseline(
    rewards: Tensor,
    delta: Tensor,
    group_size: int,
    *,
    coef: float = 2.0,
    bound: RccBound = DEFAULT_RCC_BOUND,
) -> Tensor:
    """RCC baseline of every row: ``b* = mean_g R + coef * Cov_g(R, delta)``.

    The variance-minimising baseline under the importance weight
    ``w = exp(delta)`` is ``E[w^2 R] / E[w^2]``; with ``w^2 ~ 1 + 2 delta`` it is
    ``E[R] + 2 Cov(R, delta)`` to first order (BiCC paper, RCC). ``delta`` is
    detached: a baseline carries no gradient.

    The first-order form is unbounded: ``R = [1, 0, 0, 0]``,
    ``delta = [0, 0, 0, 5]`` gives ``b* = 0.25 + 2 * (-0.3125) = -0.375``, so the
    wrong rows get a positive advantage. ``E[w^2 R] / E[w^2]`` is a weighted mean
    of the rewards and always lies in ``[min R, max R]``; ``bound="reward_range"``
    clamps ``b*`` to the group's ``[min_g R, max_g R]`` so that the best row never
    gets a negative advantage nor the worst a positive one. ``"none"``: the
    paper's formula as written. See ``docs/rcc.md`` for the measurement behind
    the default.

    Args:
        rewards, delta: (B,).
        bound: ``"reward_range"`` or ``"none"``.
    Returns:
        (B,) the group's baseline repeated on each of its rows.
    """
    num_groups(rewards.shape[0], group_size, min_size=2, what="rcc_baseline")
    rewards = as_float(rewards)
    check_rows("delta", delta, rewards.shape[0])
    if bound not in RCC_BOUNDS:
        raise ValueError(f"unknown RCC bound {bound!r}; valid: {', '.join(RCC_BOUNDS)}")
    centered, _ = _centered_rewards(rewards, group_size)
    d = group_view(delta.detach().to(rewards.dtype), group_size)
    # Population covariance from the exactly-centred rewards: an all-equal
    # group has covariance exactly 0, so its baseline is exactly its mean.
    cov = (centered * (d - d.mean(1, keepdim=True))).mean(1, keepdim=True)
    r = group_view(rewards, group_size)
    baseline = r.mean(1, keepdim=True) + coef * cov  # (B/G, 1)
    if bound == "reward_range":
        low, high = r.amin(1, keepdim=True), r.amax(1, keepdim=True)
        baseline = torch.minimum(torch.maximum(baseline, low), high)
    return baseline.expand(-1, group_size).reshape(-1)


def rcc_advantages(
    rewards: Tensor,
    delta: Tensor,
    group_size: int,
    *,
    coef: float = 2.0,
    bound: RccBound = DEFAULT_RCC_BOUND,
    scale_by_std: bool = True,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Advantages with the RCC-corrected baseline.

    ``A_i = (R_i - b*) / (std_g R + eps)`` (or ``R_i - b*`` when
    ``scale_by_std=False``) with ``b* = mean_g R + coef * Cov_g(R, delta)``,
    Cov the population covariance, clamped to ``[min_g R, max_g R]`` when
    ``bound="reward_range"`` (:func:`rcc_baseline`). ``coef=0`` recovers
    :func:`group_advantages`. A group of equal rewards gives exactly 0.

    Args:
        rewards: (B,) rewards. delta: (B,) from :func:`sequence_delta`.
    Returns:
        (B,) advantages.
    """
    num_groups(rewards.shape[0], group_size, min_size=2, what="rcc_advantages")
    rewards = as_float(rewards)
    check_rows("delta", delta, rewards.shape[0])
    _, equal = _centered_rewards(rewards, group_size)
    b_shift = group_view(
        rcc_baseline(rewards, delta, group_size, coef=coef, bound=bound), group_size
    )
    adv = group_view(rewards, group_size) - b_shift
    adv = torch.where(equal.unsqueeze(1), torch.zeros_like(adv), adv)
    if scale_by_std:
        adv = adv / (_group_std(rewards, group_size, equal) + eps)
    return adv.reshape(-1)


def collapse_rate(rewards: Tensor, group_size: int) -> Tensor:
    """Advantage collapse rate: share of groups whose rewards are all equal.

    Such groups give a zero advantage and no gradient (AVSPO paper's ACR).

    Args:
        rewards: (B,).
    Returns:
        0-dim tensor in [0, 1].
    """
    num_groups(rewards.shape[0], group_size, min_size=1, what="collapse_rate")
    _, equal = _centered_rewards(rewards, group_size)
    return equal.float().mean()
