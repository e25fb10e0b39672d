"""Our advantage estimators behind verl's estimator registry (``crlvr_*``).

verl calls an estimator as ``fn(token_level_rewards=(B, T), response_mask=(B, T),
index=B uids, config=AlgoConfig)`` and expects ``(advantages, returns)``, both
(B, T). The reward of a row is the sum of its token rewards (outcome reward on
the last token). Rows are sorted into groups by ``index``
(:func:`.groups.grouped_apply`, once per group size present; a group of one
gets 0), the core function runs, and the per-row result goes back to batch
order, repeated on every completion token.

================== ================================================ ======================
name               core call                                        needs
================== ================================================ ======================
crlvr_grpo         ``group_advantages(scale_by_std=True)``          --
crlvr_dr_grpo      ``group_advantages(scale_by_std=False)``         --
crlvr_rcc          ``rcc_advantages(scale_by_std=True)``            reference log-probs
crlvr_dr_grpo_rcc  ``rcc_advantages(scale_by_std=False)``           reference log-probs
crlvr_conspo       labels ``R > threshold``, margin, window         training progress
crlvr_conspo_rcc   labels ``R > rcc_baseline``, margin, window      both
================== ================================================ ======================

The estimators marked as needing something get it from the ``crlvr_sync``
trainer (:mod:`.trainer`), which calls them with the extra keyword arguments;
through verl's own trainers they raise a ``ValueError`` saying so. RCC's
``delta = logp - ref_logp`` uses the log-probs of the sampling policy
(``old_log_probs``), which is the current policy when advantages are computed. Over
stale rows (verl's asynchronous modes) ``rcc_log_weights`` (B,) carries the importance
weights of :mod:`.offpolicy` (``rcc_offpolicy: importance_weighted``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from verl.trainer.ppo import core_algos

from ...algorithms import (
    conspo_margin,
    group_advantages,
    rcc_advantages,
    rcc_baseline,
    sequence_delta,
)
from ...algorithms.advantages import DEFAULT_EPS, DEFAULT_RCC_BOUND
from ...algorithms.ops import Tensor
from .groups import conspo_window_scale, encode_conspo_targets, grouped_apply
from .offpolicy import weighted_rcc_advantages, weighted_rcc_baselines

PREFIX = "crlvr_"


def _to_tokens(per_row: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row values (B,) -> verl's (advantages, returns), (B, T) each."""
    adv = per_row.unsqueeze(-1) * response_mask.to(per_row.dtype)
    return adv, adv


def _rcc_delta(
    name: str,
    old_log_probs: Tensor | None,
    ref_log_prob: Tensor | None,
    response_mask: Tensor,
    reduce: str,
) -> Tensor:
    """RCC's (B,) ``delta`` from the sampling policy's and the reference's log-probs."""
    if old_log_probs is None or ref_log_prob is None:
        raise ValueError(
            f"advantage estimator {name!r} needs the reference log-probs: set "
            "trainer.v1.trainer_mode=crlvr_sync (or crlvr_colocate_async / crlvr_separate_async) "
            "and actor_rollout_ref.actor.use_kl_loss=True "
            "(kl_loss_coef may be 0)"
        )
    mask = response_mask.to(old_log_probs.dtype)
    return sequence_delta(old_log_probs, ref_log_prob, mask, reduce=reduce)


def rcc_baselines(
    rewards: Tensor,
    delta: Tensor,
    index: Sequence[Hashable],
    *,
    coef: float,
    bound: str = DEFAULT_RCC_BOUND,
) -> Tensor:
    """RCC's per-row baseline ``b* = mean_g R + coef * Cov_g(R, delta)`` (clamped to the
    group's reward range unless ``bound='none'``), in batch order; a group of one gets 0.

    Args:
        rewards, delta: (B,). index: B group ids.
    """
    return grouped_apply(
        index, lambda g, r, d: rcc_baseline(r, d, g, coef=coef, bound=bound), rewards, delta
    )


def grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Sequence[Hashable],
    config: Any = None,
    *,
    eps: float = DEFAULT_EPS,
) -> tuple[Tensor, Tensor]:
    """GRPO: ``(R_i - mean_g R) / (std_g R + eps)`` (arXiv:2402.03300)."""
    rewards = token_level_rewards.sum(dim=-1)
    adv = grouped_apply(index, lambda g, r: group_advantages(r, g, eps=eps), rewards)
    return _to_tokens(adv, response_mask)


def dr_grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Sequence[Hashable],
    config: Any = None,
) -> tuple[Tensor, Tensor]:
    """Dr.GRPO: ``R_i - mean_g R`` (arXiv:2503.20783)."""
    rewards = token_level_rewards.sum(dim=-1)
    adv = grouped_apply(index, lambda g, r: group_advantages(r, g, scale_by_std=False), rewards)
    return _to_tokens(adv, response_mask)


def _rcc(name: str, scale_by_std: bool) -> Callable[..., tuple[Tensor, Tensor]]:
    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Sequence[Hashable],
        config: Any = None,
        *,
        old_log_probs: Tensor | None = None,
        ref_log_prob: Tensor | None = None,
        rcc_coef: float = 2.0,
        rcc_delta: str = "mean",
        rcc_bound: str = DEFAULT_RCC_BOUND,
        eps: float = DEFAULT_EPS,
        rcc_log_weights: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        rewards = token_level_rewards.sum(dim=-1)
        delta = _rcc_delta(name, old_log_probs, ref_log_prob, response_mask, rcc_delta)
        if rcc_log_weights is not None:
            # stale rows, rcc_offpolicy: importance_weighted (.offpolicy)
            adv = weighted_rcc_advantages(
                rewards,
                delta,
                rcc_log_weights,
                index,
                coef=rcc_coef,
                bound=rcc_bound,
                scale_by_std=scale_by_std,
                eps=eps,
            )
            return _to_tokens(adv, response_mask)

        def per_group_size(g: int, r: Tensor, d: Tensor) -> Tensor:
            return rcc_advantages(
                r, d, g, coef=rcc_coef, bound=rcc_bound, scale_by_std=scale_by_std, eps=eps
            )

        return _to_tokens(grouped_apply(index, per_group_size, rewards, delta), response_mask)

    scaling = "(R_i - b*) / (std_g R + eps)" if scale_by_std else "R_i - b*"
    estimator.__doc__ = (
        f"RCC advantages {scaling}, ``b* = mean_g R + rcc_coef * Cov_g(R, delta)`` "
        "(the BiCC paper's Reward-Confidence Correction), clamped to the group's "
        "``[min R, max R]`` unless ``rcc_bound='none'``."
    )
    estimator.__name__ = name
    return estimator


def _conspo(name: str, with_rcc: bool) -> Callable[..., tuple[Tensor, Tensor]]:
    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Sequence[Hashable],
        config: Any = None,
        *,
        progress: float | None = None,
        max_margin: float = 0.01,
        margin_warmup: float = 0.3,
        threshold: float = 0.5,
        old_log_probs: Tensor | None = None,
        ref_log_prob: Tensor | None = None,
        rcc_coef: float = 2.0,
        rcc_delta: str = "mean",
        rcc_bound: str = DEFAULT_RCC_BOUND,
        rcc_log_weights: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        if progress is None:
            raise ValueError(
                f"advantage estimator {name!r} needs the training progress for its margin "
                "curriculum: set trainer.v1.trainer_mode=crlvr_sync (or crlvr_colocate_async / "
                "crlvr_separate_async)"
            )
        rewards = token_level_rewards.sum(dim=-1)
        if with_rcc:
            delta = _rcc_delta(name, old_log_probs, ref_log_prob, response_mask, rcc_delta)
            if rcc_log_weights is None:
                baseline = rcc_baselines(rewards, delta, index, coef=rcc_coef, bound=rcc_bound)
            else:
                baseline = weighted_rcc_baselines(
                    rewards, delta, rcc_log_weights, index, coef=rcc_coef, bound=rcc_bound
                )
            positive = rewards > baseline
        else:
            positive = rewards > threshold
        margin = conspo_margin(progress, max_margin=max_margin, warmup=margin_warmup)
        # The whole batch is here: its groups per usable group go to the loss, which
        # normalises every micro-batch by the window's usable groups (as the TRL path).
        scale = conspo_window_scale(positive, index)
        targets = encode_conspo_targets(positive, margin, scale).to(token_level_rewards.dtype)
        return _to_tokens(targets, response_mask)

    cut = "R > b* (RCC baseline)" if with_rcc else "R > threshold"
    estimator.__doc__ = (
        f"ConSPO targets for the crlvr_conspo loss: positives {cut} get 1 + m_t, the rest "
        "-c, m_t the cosine margin at this progress (arXiv:2605.12969), c the batch's groups "
        "per usable group (the loss's window normaliser, groups.conspo_window_scale)."
    )
    estimator.__name__ = name
    return estimator


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what the ``crlvr_sync`` trainer must pass it."""

    name: str
    fn: Callable[..., tuple[Tensor, Tensor]]
    needs_ref: bool = False
    contrastive: bool = False


ESTIMATORS: dict[str, EstimatorSpec] = {
    spec.name: spec
    for spec in (
        EstimatorSpec(PREFIX + "grpo", grpo),
        EstimatorSpec(PREFIX + "dr_grpo", dr_grpo),
        EstimatorSpec(PREFIX + "rcc", _rcc(PREFIX + "rcc", True), needs_ref=True),
        EstimatorSpec(PREFIX + "dr_grpo_rcc", _rcc(PREFIX + "dr_grpo_rcc", False), needs_ref=True),
        EstimatorSpec(PREFIX + "conspo", _conspo(PREFIX + "conspo", False), contrastive=True),
        EstimatorSpec(
            PREFIX + "conspo_rcc",
            _conspo(PREFIX + "conspo_rcc", True),
            needs_ref=True,
            contrastive=True,
        ),
    )
}


def register_estimators() -> list[str]:
    """Register every :data:`ESTIMATORS` entry with verl; return the names.

    verl refuses a name bound to a *different* function; the functions here
    are created once per process, so a repeated call re-binds the same ones.
    """
    for spec in ESTIMATORS.values():
        core_algos.register_adv_est(spec.name)(spec.fn)
    return list(ESTIMATORS)
