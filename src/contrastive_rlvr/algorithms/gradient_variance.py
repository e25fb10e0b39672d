"""Exact gradient variance of group policy-gradient estimators in a softmax bandit.

A bandit has K answers with logits ``theta`` (K,), policy ``pi = softmax(theta)``,
a reward ``R_k`` per answer, and a group of G answers drawn i.i.d. from a
sampling distribution ``q`` (``pi_old``, or the reference). The group estimator
of the policy gradient is

    g_hat = (1/G) sum_i A_i h_{a_i},    h_k = w_k grad log pi(k) = w_k (e_k - pi)

with ``w_k = pi(k) / q(k)`` the importance weight (1 on-policy) and ``A_i`` the
advantage of row i computed from the whole group (group mean, RCC, ...). A
group is a multiset of answers, so its distribution is multinomial over the
``C(G + K - 1, K - 1)`` compositions of G into K counts (75,582 for K = 12,
G = 8): summing over them gives ``E[g_hat]`` and ``tr Cov(g_hat)`` exactly, for
any advantage rule (``docs/rcc.md``, ``benchmarks/rcc_variance.py``).

The exact variance-minimising constant baseline of ``w (R - b) g`` is
``b_opt = E_q[w^2 R |g|^2] / E_q[w^2 |g|^2]`` (:func:`variance_optimal_baseline`).
"""

from __future__ import annotations

import itertools
import math

import torch

from .ops import Tensor


def compositions(num_answers: int, group_size: int) -> Tensor:
    """Every way to put ``group_size`` draws into ``num_answers`` answers, (N, K) long.

    ``N = C(G + K - 1, K - 1)``; each row sums to G.
    """
    if num_answers < 1 or group_size < 1:
        raise ValueError(
            f"compositions needs num_answers >= 1 and group_size >= 1, "
            f"got {num_answers} and {group_size}"
        )
    if num_answers == 1:
        return torch.full((1, 1), group_size, dtype=torch.long)
    # Stars and bars: choose the K - 1 bar positions among G + K - 1 slots.
    slots = group_size + num_answers - 1
    bars = torch.tensor(list(itertools.combinations(range(slots), num_answers - 1)))  # (N, K-1)
    edges = torch.cat(
        [torch.full((bars.shape[0], 1), -1), bars, torch.full((bars.shape[0], 1), slots)], dim=1
    )
    return edges.diff(dim=1) - 1  # (N, K): stars between consecutive bars


def composition_log_probs(counts: Tensor, probs: Tensor) -> Tensor:
    """Multinomial log-probability of each composition under ``probs``, (N,).

    ``log G! - sum_k log n_k! + sum_k n_k log q_k``; a zero-probability answer
    drawn at least once gives ``-inf``.
    """
    counts_f = counts.to(probs.dtype)
    group_size = counts_f[0].sum()
    log_coef = torch.lgamma(group_size + 1) - torch.lgamma(counts_f + 1).sum(1)
    terms = torch.where(counts > 0, counts_f * probs.log(), torch.zeros_like(counts_f))
    return log_coef + terms.sum(1)


def composition_rows(counts: Tensor) -> Tensor:
    """The answers of each composition as G rows in answer order, (N, G) long."""
    ends = counts.cumsum(1)  # (N, K): one past the last row of each answer
    slot = torch.arange(int(counts[0].sum())).expand(counts.shape[0], -1).contiguous()
    return torch.searchsorted(ends, slot, right=True)  # (N, G)


def group_coefficients(rows: Tensor, advantages: Tensor, num_answers: int) -> Tensor:
    """Coefficient of each answer's ``h_k`` in ``g_hat`` of each group, (N, K).

    ``C[n, k] = (1/G) sum_{i in group n, a_i = k} A_i``.

    Args:
        rows: (N, G) answers of each group. advantages: (N, G) or (N * G,).
    """
    adv = advantages.reshape(rows.shape)
    coef = torch.zeros(rows.shape[0], num_answers, dtype=adv.dtype)
    return coef.scatter_add_(1, rows, adv) / rows.shape[1]


def estimator_moments(
    coefficients: Tensor, group_log_probs: Tensor, contributions: Tensor
) -> tuple[Tensor, Tensor]:
    """``E[g_hat]`` (P,) and ``tr Cov(g_hat)`` (0-dim) over all compositions.

    Args:
        coefficients: (N, K) from :func:`group_coefficients`.
        group_log_probs: (N,) from :func:`composition_log_probs`.
        contributions: (K, P) ``h_k = w_k grad log pi(k)``.
    """
    p = torch.exp(group_log_probs)
    estimates = coefficients @ contributions  # (N, P)
    mean = p @ estimates
    second = p @ estimates.pow(2).sum(1)
    return mean, second - mean.pow(2).sum()


def softmax_scores(logits: Tensor) -> Tensor:
    """``grad_theta log softmax(theta)[k] = e_k - pi`` for every answer k, (K, K)."""
    pi = torch.softmax(logits, dim=0)
    return torch.eye(logits.shape[0], dtype=logits.dtype) - pi.unsqueeze(0)


def variance_optimal_baseline(
    probs: Tensor, rewards: Tensor, weights: Tensor, score_sq_norms: Tensor
) -> Tensor:
    """The constant baseline minimising ``tr Cov(w (R - b) g)``, 0-dim.

    ``b_opt = E_q[w^2 R |g|^2] / E_q[w^2 |g|^2]`` (set the derivative of
    ``E[w^2 (R - b)^2 |g|^2]`` in b to 0). It is a weighted mean of the rewards,
    so it lies in ``[min R, max R]``.

    Args:
        probs: (K,) sampling probabilities q (or 1/N each for N samples).
        rewards, weights, score_sq_norms: (K,) ``R``, ``w`` and ``|g|^2`` per
            answer (or per sample).
    """
    mass = probs * weights.pow(2) * score_sq_norms
    return (mass * rewards).sum() / mass.sum()


def num_compositions(num_answers: int, group_size: int) -> int:
    """``C(G + K - 1, K - 1)``: how many rows :func:`compositions` returns."""
    return math.comb(group_size + num_answers - 1, num_answers - 1)
