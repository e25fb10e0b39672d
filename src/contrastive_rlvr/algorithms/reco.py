"""ReCo: response- and token-level reweighting of GRPO for pass@k coverage (2026).

Only the paper's abstract is public: GRPO concentrates on responses the base
model already generates with high probability, (a) because repeated
high-probability responses dominate the group gradient and (b) because the
token importance ratio further reinforces tokens that became more likely.
ReCo normalises each response by its occurrence in the group and replaces
the ratio by a "variance-based ratio" that gives a larger update scale to
non-saturated decision points. The formulas below are our reading
(``docs/token-methods.md``).

(a) Occurrence weight of row i (:func:`occurrence_weights`):
``w_i = 1 / c_i``, ``c_i`` the number of rows of i's group with the same key
(token ids, or a normalised answer). The weights multiply each row's loss
terms, and the loss is divided by the *weighted* count (``sum_i w_i`` rows,
or ``sum_i w_i |o_i|`` tokens for token-mean), i.e. the number of distinct
responses: each distinct response counts once, however often it was sampled.
The advantages themselves are unchanged (the baseline is still the mean over
all G samples). Long reasoning traces are almost never sampled twice, so with
token-id keys these weights are all 1 there. The alternative reading
(:func:`expected_occurrence_weights`, ``response_weights="expected"``) uses the
*expected* occurrence ``G * pi_old(o_i | q)`` in place of the observed count,
``w_i = 1 / max(1, G pi_old(o_i | q))``: a response the sampler would draw more
than once in G is down-weighted even when it was drawn once.

(b) Variance factor of token t (:func:`variance_factor`): with ``p_t`` the
current probability of the sampled token,

    f_t = sg(p_t (1 - p_t)) / Z

the Bernoulli variance of "the sampled token is chosen": 1/4 at p = 1/2, 0 as
p -> 1 (saturated; no plausible alternative left) and as p -> 0. ``Z`` is the
mean of ``p(1-p)`` over the batch's completion tokens (``factor_norm="mean"``,
default: the factor only redistributes the update among tokens and its mean
is 1, like an on-policy ratio) or 1/4 (``"max"``: f in [0, 1], no batch
dependence). Unlike the ratio ``pi_theta / pi_old``, which grows as a token
becomes more likely, ``f_t`` shrinks once ``p_t`` passes 1/2: no
rich-get-richer feedback. But ``p(1 - p)`` also vanishes for a *rare* sampled
token (p -> 0), exactly where exploration happened. The entropy factor
(:func:`entropy_factor`, ``factor="entropy"``) uses the entropy of the whole
next-token distribution instead,

    f_t = sg(H_t) / Z,    H_t = -sum_v pi(v | context_t) log pi(v | context_t)

which is large at every non-saturated decision point whichever token was
sampled there, and 0 only where the distribution is one-hot. ``Z`` is the
batch's mean entropy (``"mean"``) or ``log V`` (``"max"``, V the vocabulary
size: f in [0, 1]).

The ReCo loss (:func:`reco_loss`) uses ``f_t`` in place of the ratio in a
policy-gradient term, keeping PPO's trust region as a gate:

    loss = -(1/N_w) sum_i w_i agg_t [ keep_t * f_t * A_it * exp(l_t - sg(l_t)) ]

whose value is ``-f A`` per token and whose gradient is ``-f A grad l_t``;
``keep_t`` is 0 where PPO's clipped surrogate would have no gradient (ratio
``rho_t = exp(l_t - l_old_t)`` above ``1 + clip_high`` with A > 0, below
``1 - clip_low`` with A < 0), so several updates per batch stay near the
sampling policy.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, get_args

import torch

from .aggregation import agg_loss
from .losses import (
    TokenClipOptions,
    _add_kl,
    _clip_flags,
    _token_clip_metrics,
    log_ratio,
    register_policy_loss,
)
from .ops import (
    Tensor,
    check_rows,
    check_same_shape,
    group_view,
    masked_fill_zero,
    masked_mean,
    num_groups,
    per_token,
)

FactorNorm = Literal["mean", "max"]
FACTOR_NORMS: tuple[str, ...] = get_args(FactorNorm)
Factor = Literal["variance", "entropy"]
FACTORS: tuple[str, ...] = get_args(Factor)
ResponseWeights = Literal["count", "expected"]
RESPONSE_WEIGHTS: tuple[str, ...] = get_args(ResponseWeights)
# The largest Bernoulli variance p(1 - p), at p = 1/2.
MAX_VARIANCE = 0.25
# Floor of the mean variance: a batch of fully saturated tokens (mean 0) gives
# factor 0 instead of 0/0.
VARIANCE_FLOOR = 1e-12
# A token at or above this probability counts as saturated in the metrics.
SATURATED_PROB = 0.99


def completion_keys(completion_ids: Tensor, mask: Tensor) -> list[tuple[int, ...]]:
    """One hashable key per row: its completion token ids (mask-1 cells, in order)."""
    check_same_shape(completion_ids=completion_ids, mask=mask)
    real = mask.bool()
    return [tuple(completion_ids[i][real[i]].tolist()) for i in range(completion_ids.shape[0])]


def occurrence_weights(keys: Sequence[Hashable], group_size: int) -> Tensor:
    """ReCo response weights ``w_i = 1 / (number of rows of i's group with key_i)``.

    Args:
        keys: B hashable keys, group by group (e.g. :func:`completion_keys`, or
            normalised answer strings to count same-answer responses as one).
        group_size: G.
    Returns:
        (B,) float weights in (0, 1]; each group's weights sum to its number of
        distinct keys.
    """
    num_groups(len(keys), group_size, min_size=1, what="occurrence_weights")
    weights = []
    for g in range(0, len(keys), group_size):
        members = list(keys[g : g + group_size])
        weights.extend(1.0 / members.count(k) for k in members)
    return torch.tensor(weights)


def expected_occurrence_weights(old_logp: Tensor, mask: Tensor, group_size: int) -> Tensor:
    """Alternative reading of (a): ``w_i = 1 / max(1, G * pi_old(o_i | q))``.

    The expected number of times o_i appears among G samples is
    ``G * pi_old(o_i)``; a response rarer than one in G keeps weight 1. Useful
    for short completions, where high-probability responses are common.

    Args:
        old_logp, mask: (B, T) sampling-time log-probs and mask (any rows; they
            need not be whole groups).
        group_size: G, the number of samples drawn per prompt.
    Returns:
        (B,) weights in (0, 1].
    """
    check_same_shape(old_logp=old_logp, mask=mask)
    # Each row's weight needs only its own pi_old and G, so any subset of rows
    # works (e.g. one process's share of a group).
    if group_size < 1:
        raise ValueError(f"expected_occurrence_weights: group_size must be >= 1, got {group_size}")
    seq_logp = masked_fill_zero(old_logp.detach(), mask).sum(1)  # (B,) log pi_old(o | q)
    expected = group_size * torch.exp(seq_logp)
    return 1.0 / expected.clamp(min=1.0)


def distinct_share(weights: Tensor, group_size: int) -> Tensor:
    """Mean over groups of (distinct responses / G), from occurrence weights (B,)."""
    return group_view(weights, group_size).sum(1).mean() / group_size


def variance_factor(
    logp: Tensor,
    mask: Tensor,
    *,
    factor_norm: FactorNorm = "mean",
    variance_mean: float | Tensor | None = None,
) -> Tensor:
    """ReCo token factor ``f_t = sg(p_t (1 - p_t)) / Z`` (module docstring), (B, T).

    Args:
        logp: (B, T) log-probs of the sampled tokens under the current policy.
        mask: (B, T).
        factor_norm: ``"mean"`` (Z = mean variance over completion tokens) or
            ``"max"`` (Z = 1/4).
        variance_mean: Z for ``"mean"`` from the whole batch, so that
            micro-batches use the same normaliser; default: this batch's mean.
    Returns:
        (B, T) detached factors, 0 on padding.
    """
    check_same_shape(logp=logp, mask=mask)
    p = torch.exp(masked_fill_zero(logp.detach(), mask))
    var = masked_fill_zero(p * (1 - p), mask)
    if factor_norm == "max":
        return var / MAX_VARIANCE
    if factor_norm != "mean":
        raise ValueError(f"unknown factor_norm {factor_norm!r}; valid: {', '.join(FACTOR_NORMS)}")
    z = masked_mean(var, mask) if variance_mean is None else torch.as_tensor(variance_mean)
    return var / z.clamp(min=VARIANCE_FLOOR)


def entropy_factor(
    entropy: Tensor,
    mask: Tensor,
    *,
    factor_norm: FactorNorm = "mean",
    factor_mean: float | Tensor | None = None,
    vocab_size: int | None = None,
) -> Tensor:
    """ReCo entropy factor ``f_t = sg(H_t) / Z`` (module docstring), (B, T).

    Args:
        entropy: (B, T) entropy (nats) of the current policy's next-token
            distribution at each completion position.
        mask: (B, T).
        factor_norm: ``"mean"`` (Z = mean entropy over completion tokens) or
            ``"max"`` (Z = log V, the largest entropy).
        factor_mean: Z for ``"mean"`` from the whole batch (micro-batches then
            share one normaliser); default: this batch's mean.
        vocab_size: V, needed for ``"max"``.
    Returns:
        (B, T) detached factors, 0 on padding.
    """
    check_same_shape(entropy=entropy, mask=mask)
    h = masked_fill_zero(entropy.detach(), mask)
    if factor_norm == "max":
        if vocab_size is None or vocab_size < 2:
            raise ValueError(
                f"entropy_factor: factor_norm='max' divides by log(vocab_size); "
                f"pass vocab_size >= 2, got {vocab_size}"
            )
        return h / math.log(vocab_size)
    if factor_norm != "mean":
        raise ValueError(f"unknown factor_norm {factor_norm!r}; valid: {', '.join(FACTOR_NORMS)}")
    z = masked_mean(h, mask) if factor_mean is None else torch.as_tensor(factor_mean)
    return h / z.clamp(min=VARIANCE_FLOOR)


@dataclass(frozen=True, kw_only=True)
class RecoOptions(TokenClipOptions):
    """:func:`reco_loss`'s options: the clipped-loss ones (its trust-region gate and
    aggregation) and ReCo's own.

    Attributes:
        weights: (B,) response weights (:func:`occurrence_weights` or
            :func:`expected_occurrence_weights`), or None for ReCo's token factor alone.
        factor: ``"variance"`` (``p(1-p)``, :func:`variance_factor`) or ``"entropy"``
            (:func:`entropy_factor`, needs ``entropy``).
        factor_norm: ``"mean"`` or ``"max"`` (see the two factor functions).
        variance_mean: Z for ``factor_norm="mean"`` from the whole batch: the mean of the
            raw factor (``p(1-p)``, or the entropy) over the batch's completion tokens.
        entropy: (B, T) next-token entropies of the current policy, for ``"entropy"``.
        vocab_size: V, for ``factor="entropy"`` with ``factor_norm="max"``.
    """

    PAPER: ClassVar[tuple[str, ...]] = (*TokenClipOptions.PAPER, "factor", "factor_norm")
    weights: Tensor | None = None
    factor: Factor = "variance"
    factor_norm: FactorNorm = "mean"
    variance_mean: float | Tensor | None = None
    entropy: Tensor | None = None
    vocab_size: int | None = None


@register_policy_loss("reco", paper="ReCo (2026), abstract only; formulas are our reading")
def reco_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: RecoOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """ReCo policy loss: variance factor instead of the ratio, occurrence-weighted rows.

    ``loss = agg( -w_i keep_t f_t A_t exp(l_t - sg l_t) ) + beta agg(w_i k3_t)``
    (module docstring), with the row normaliser ``num_rows`` defaulting to
    ``sum_i w_i`` and the token normaliser ``num_tokens`` to ``sum_i w_i |o_i|``
    when ``weights`` are given (pass the whole batch's values under gradient
    accumulation, as for every loss).

    Args:
        logp, old_logp, mask: (B, T). advantages: (B, T) (per-row ones are
            broadcast by :func:`policy_loss`).
        options: :class:`RecoOptions`; ``clip_low``, ``clip_high``: the trust-region
            gate (GRPO 0.2/0.2; DAPO 0.2/0.28); ``agg``, ``max_len``, ``num_rows``,
            ``num_tokens``: aggregation (:func:`agg_loss`); ``ref_logp``, ``beta``:
            optional k3 KL to the reference, weighted like the policy term.
    Returns:
        ``(loss, metrics)``: ``loss/policy``, ``clip/*`` and ``ratio/mean`` as
        the other losses (``clip/*`` = share of tokens the gate zeroes),
        ``reco/factor_max`` (largest f_t), ``reco/variance_mean`` (mean p(1-p)),
        ``reco/saturated_frac`` (share of tokens with p >= 0.99), with the
        entropy factor ``reco/entropy_mean`` (mean H_t), with weights
        ``reco/distinct_frac`` (sum_i w_i / B), ``kl/mean`` with ref_logp.
    """
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    advantages = per_token(advantages, mask)
    o, weights = options, options.weights
    rows = logp.shape[0]
    w = torch.ones(rows, dtype=logp.dtype, device=logp.device) if weights is None else weights
    check_rows("weights", w, rows)
    w = w.detach().to(logp.dtype).unsqueeze(1)  # (B, 1)
    if weights is not None:
        num_rows = w.sum() if o.num_rows is None else o.num_rows
        num_tokens = (w * mask).sum() if o.num_tokens is None else o.num_tokens
        o = replace(o, num_rows=num_rows, num_tokens=num_tokens)

    ratio = torch.exp(log_ratio(logp, old_logp, mask))
    low, high = _clip_flags(ratio, advantages, o.clip_low, o.clip_high)
    f = _token_factor(logp, mask, o)
    safe_logp = masked_fill_zero(logp, mask)
    unit = torch.exp(safe_logp - safe_logp.detach())  # value 1, gradient d logp
    per_tok = -(w * ~(low | high) * f * advantages) * unit
    loss = agg_loss(per_tok, mask, **o.agg_kwargs())  # type: ignore[arg-type]

    p = torch.exp(safe_logp.detach())
    metrics = _token_clip_metrics(ratio, advantages, mask, o.clip_low, o.clip_high)
    metrics["reco/factor_max"] = masked_fill_zero(f, mask).max()
    metrics["reco/variance_mean"] = masked_mean(p * (1 - p), mask)
    metrics["reco/saturated_frac"] = masked_mean((p >= SATURATED_PROB).float(), mask)
    if o.entropy is not None:
        metrics["reco/entropy_mean"] = masked_mean(o.entropy.detach(), mask)
    if o.weights is not None:
        metrics["reco/distinct_frac"] = w.sum() / rows
    loss, metrics = _add_kl(loss, metrics, logp, mask, o, row_weights=w)
    return loss, {k: v.detach() for k, v in metrics.items()}


def _token_factor(logp: Tensor, mask: Tensor, options: RecoOptions) -> Tensor:
    """ReCo's (B, T) token factor of ``options.factor``: :func:`variance_factor` or
    :func:`entropy_factor` (which needs ``options.entropy``)."""
    o, entropy = options, options.entropy
    if o.factor == "variance":
        if entropy is not None:
            raise ValueError("reco_loss: entropy is only used with factor='entropy'")
        return variance_factor(logp, mask, factor_norm=o.factor_norm, variance_mean=o.variance_mean)
    if o.factor == "entropy":
        if entropy is None:
            raise ValueError("reco_loss: factor='entropy' needs entropy, the (B, T) entropies")
        return entropy_factor(
            entropy,
            mask,
            factor_norm=o.factor_norm,
            factor_mean=o.variance_mean,
            vocab_size=o.vocab_size,
        )
    raise ValueError(f"unknown ReCo factor {o.factor!r}; valid: {', '.join(FACTORS)}")
