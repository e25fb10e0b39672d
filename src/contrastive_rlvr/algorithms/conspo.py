"""ConSPO: Contrastive Sequence-level Policy Optimization (arXiv:2605.12969).

Score of a completion: its length-normalised log-probability
``s(o) = (1/|o|) sum_t log pi_theta(o_t | q, o_<t)`` (no ratio, no clip).
Per prompt, with positives P (N+ of them) and negatives N, the objective is

    J(q) = (1/N+) sum_{i in P} tau * log[ e^{(s_i - m)/tau}
                                          / (e^{(s_i - m)/tau} + sum_{j in N} e^{s_j/tau}) ]

(InfoNCE, each positive against all negatives of its group), with a margin
``m`` that grows on a cosine curriculum (:func:`conspo_margin`). Groups that
are all positive or all negative are dropped. Its gradient on a positive
score is ``dJ/ds_i = (1 - P_i) / N+`` (Lemma 2), ``P_i`` the softmax term.
"""

from __future__ import annotations

import math

import torch

from .ops import Tensor, check_rows, check_same_shape, group_view, masked_mean
from .ops import num_groups as count_groups


def conspo_margin(progress: float, *, max_margin: float = 0.01, warmup: float = 0.3) -> float:
    """Cosine margin curriculum: ``m = (M/2)(1 - cos(pi * min(progress/warmup, 1)))``.

    Args:
        progress: training progress in [0, 1] (step / total steps); clamped.
        max_margin: M, the final margin (paper default 0.01).
        warmup: alpha, the share of training over which the margin ramps up (0.3).
    """
    if warmup <= 0:
        raise ValueError(f"warmup must be > 0, got {warmup}")
    r = min(max(progress, 0.0), 1.0) / warmup
    return 0.5 * max_margin * (1.0 - math.cos(math.pi * min(r, 1.0)))


def usable_groups(
    rewards: Tensor, group_size: int, *, threshold: float = 0.5, baseline: Tensor | None = None
) -> Tensor:
    """The number of groups with both a positive (``R > cut``) and a negative row: the
    groups ConSPO's loss averages over. rewards, baseline: (B,); returns a 0-dim float."""
    cut = threshold if baseline is None else baseline
    pos = group_view(rewards > cut, group_size)
    return (pos.any(1) & (~pos).any(1)).float().sum()


def conspo_loss(
    logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    *,
    tau: float = 10.0,
    margin: float = 0.0,
    threshold: float = 0.5,
    baseline: Tensor | None = None,
    num_groups: Tensor | float | None = None,
    row_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Negative ConSPO objective averaged over the groups with both positives and negatives.

    Args:
        logp: (B, T) log-probs of the completion tokens under the policy.
        mask: (B, T), 1 on completion tokens.
        rewards: (B,) rewards; positives are ``R > threshold``.
        group_size: G >= 2; every group must be whole.
        tau: temperature (paper default 10).
        margin: ``m_t`` from :func:`conspo_margin`.
        threshold: reward above which a completion is a positive.
        baseline: optional (B,) per-row threshold replacing ``threshold``
            (used to combine ConSPO with RCC: positives are ``R > b*``).
        num_groups: the divisor of the sum over usable groups; None: their count in
            this batch. A trainer that splits a batch into micro-batches passes the whole
            batch's count (times the micro-batch's share), so the gradient does not depend
            on the split (:func:`usable_groups` counts them).
        row_weights: optional (B,) >= 0 sampling weights (vLLM's importance-sampling
            correction and the off-policy mask, :mod:`.sampling_correction`): a
            positive's term is weighted by ``w_i``, a negative enters the softmax's
            denominator as ``w_j exp(s_j / tau)`` (an importance-weighted estimate of
            the negatives' sum; ``w_j = 0`` drops it). A group needs a negative of
            weight > 0. None: every weight 1, the paper's loss.
    Returns:
        ``(loss, metrics)``; with no usable group the loss is 0 and still has a
        grad_fn. Metrics: ``conspo/valid_groups`` (share of groups used),
        ``conspo/pos_prob`` (mean P_i of positives), ``conspo/score_gap``
        (mean s of positives minus mean s of negatives, over used groups).
    """
    check_same_shape(logp=logp, mask=mask)
    n_groups = count_groups(logp.shape[0], group_size, min_size=2, what="conspo_loss")
    check_rows("rewards", rewards, logp.shape[0])
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    cut = threshold if baseline is None else baseline
    if baseline is not None:
        check_rows("baseline", baseline, logp.shape[0])
    scores = group_view(masked_mean(logp, mask, dim=1), group_size)  # (n, G)
    pos = group_view(rewards > cut, group_size)  # (n, G)
    if row_weights is None:
        weights = torch.ones_like(scores)
    else:
        check_rows("row_weights", row_weights, logp.shape[0])
        weights = group_view(row_weights.detach().to(scores.dtype), group_size)  # (n, G)
    valid = pos.any(1) & (~pos & (weights > 0)).any(1)  # (n,)
    if not bool(valid.any()):
        zero = (scores * 0.0).sum()
        nothing = torch.zeros((), device=logp.device)
        return zero, {
            "conspo/valid_groups": nothing,
            "conspo/pos_prob": nothing,
            "conspo/score_gap": nothing,
        }
    # Work on usable groups only: each has >= 1 negative, so the log-sum-exp
    # below never sees a row of -inf (whose backward would be NaN).
    s, p, w = scores[valid], pos[valid], weights[valid]  # (V, G)
    a = (s - margin) / tau
    # log(w_j e^{s_j/tau}); weight 1 (no correction) adds exactly 0.
    neg_terms = (s / tau + torch.log(w)).masked_fill(p | (w <= 0), -math.inf)
    neg_lse = torch.logsumexp(neg_terms, dim=1, keepdim=True)  # (V, 1)
    log_prob = a - torch.logaddexp(a, neg_lse)  # (V, G): log P_i, meaningful on positives
    n_pos = p.sum(1)
    objective = tau * torch.where(p, w * log_prob, torch.zeros_like(log_prob)).sum(1) / n_pos
    loss = -objective.sum() / (valid.sum() if num_groups is None else num_groups)
    with torch.no_grad():
        pos_prob = log_prob.exp()[p].mean()
        gap = ((s * p).sum(1) / n_pos - (s * ~p).sum(1) / (~p).sum(1)).mean()
    metrics = {
        "conspo/valid_groups": valid.float().sum() / n_groups,
        "conspo/pos_prob": pos_prob,
        "conspo/score_gap": gap,
    }
    return loss, metrics
