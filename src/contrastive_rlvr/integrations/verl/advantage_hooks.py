"""The ``crlvr_sync`` advantage hook: the ``crlvr_*`` estimators that need more than
rewards get it here (RCC the reference log-probs, ConSPO the training progress for its
margin), and what they added to plain GRPO is logged each step. Over stale rows RCC's
baseline takes the importance weights of :mod:`.offpolicy` (``rcc_offpolicy``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.workers.utils.padding import response_to_nested

from ...algorithms import collapse_rate, conspo_margin, sequence_delta
from . import transfer
from .advantages import ESTIMATORS, EstimatorSpec, rcc_baselines
from .groups import group_rows
from .offpolicy import effective_share, sequence_log_weights, weighted_rcc_baselines


class AdvantageHooks:
    """``_compute_advantage`` of :class:`~.trainer.CrlvrTrainer` (a mixin before verl's
    ``PPOTrainerSync``, whose ``_compute_advantage`` every other estimator goes to).
    Reads the trainer's ``config``, ``crlvr`` (our fields), ``global_steps`` and
    ``total_training_steps``."""

    @property
    def _estimator(self) -> EstimatorSpec | None:
        return ESTIMATORS.get(self.config.algorithm.adv_estimator)

    @property
    def _conspo(self) -> bool:
        spec = self._estimator
        return spec is not None and spec.contrastive

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        spec = self._estimator
        index = [transfer.group_id(k) for k in batch.keys]
        self._check_versions(batch, index, metrics)  # .staleness.StalenessHooks
        if spec is None or not (spec.needs_ref or spec.contrastive):
            return super()._compute_advantage(batch, metrics)
        weighted = self._rcc_weighted(spec, batch)
        fields = ["response_mask", "rm_scores", "old_log_probs"]
        if spec.needs_ref:
            fields.append("ref_log_prob")
        if weighted:
            fields.append("rollout_log_probs")
        data = transfer.fetch(batch, fields)
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        if weighted:
            padded["rcc_log_weights"] = sequence_log_weights(
                padded["old_log_probs"].float(),
                padded["rollout_log_probs"].float(),
                padded["response_mask"],
                self._stale_rows(batch),
            )
            metrics["crlvr/rcc/iw_effective_share"] = effective_share(
                padded["rcc_log_weights"], index
            )
        adv, returns = spec.fn(
            token_level_rewards=padded["rm_scores"],
            response_mask=padded["response_mask"],
            index=index,
            **self._estimator_kwargs(spec, padded),
        )
        rewards = padded["rm_scores"].sum(-1)
        metrics["crlvr/collapse_rate"] = _collapse_rate(rewards, index)
        metrics.update(self._estimator_metrics(spec, padded, rewards, index))
        out = TensorDict(
            {
                "advantages": response_to_nested(adv, nested_mask),
                "returns": response_to_nested(returns, nested_mask),
            },
            batch_size=len(batch),
        )
        # verl's workers read only the fields the returned meta lists: return the meta of
        # this write (it lists advantages and returns), never the one given.
        return transfer.put(batch, fields=out)

    def _rcc_weighted(self, spec: EstimatorSpec, batch: KVBatchMeta) -> bool:
        """Whether RCC's baseline takes importance weights this step: an RCC estimator,
        ``rcc_offpolicy: importance_weighted`` and a stale row in the batch."""
        return (
            spec.needs_ref
            and self.crlvr.rcc_offpolicy == "importance_weighted"
            and bool(self._stale_rows(batch).any())
        )

    def _estimator_kwargs(self, spec: EstimatorSpec, padded: TensorDict) -> dict[str, Any]:
        """The extra inputs of a ``crlvr_*`` estimator, from the batch and our config."""
        opts = self.crlvr
        kwargs: dict[str, Any] = {}
        if spec.needs_ref:
            kwargs.update(
                old_log_probs=padded["old_log_probs"],
                ref_log_prob=padded["ref_log_prob"],
                rcc_coef=opts.rcc_coef,
                rcc_delta=opts.rcc_delta,
                rcc_bound=opts.rcc_bound,
            )
            if "rcc_log_weights" in padded.keys():
                kwargs["rcc_log_weights"] = padded["rcc_log_weights"]
        if spec.contrastive:
            kwargs.update(
                progress=self._progress(),
                max_margin=opts.conspo_max_margin,
                margin_warmup=opts.conspo_warmup,
                threshold=opts.reward_threshold,
            )
        else:
            kwargs["eps"] = opts.adv_eps
        return kwargs

    def _estimator_metrics(
        self, spec: EstimatorSpec, padded: TensorDict, rewards: torch.Tensor, index: list[str]
    ) -> dict[str, float]:
        """What the estimator added to plain GRPO, logged each step: RCC's baseline shift
        ``b* - mean_g R`` (mean and largest magnitude over rows of groups of two or more)
        and ConSPO's margin ``m_t`` at this step's progress.

        Args:
            padded: the batch's padded fields (``old_log_probs``, ``ref_log_prob``,
                ``response_mask``: (B, T); ``rcc_log_weights``: (B,) over stale rows).
            rewards: (B,). index: B group ids.
        """
        opts, out = self.crlvr, {}
        if spec.needs_ref:
            delta = sequence_delta(
                padded["old_log_probs"],
                padded["ref_log_prob"],
                padded["response_mask"].to(padded["old_log_probs"].dtype),
                reduce=opts.rcc_delta,
            )
            if "rcc_log_weights" in padded.keys():
                baseline = weighted_rcc_baselines(
                    rewards,
                    delta,
                    padded["rcc_log_weights"],
                    index,
                    coef=opts.rcc_coef,
                    bound=opts.rcc_bound,
                )
            else:
                baseline = rcc_baselines(
                    rewards.float(), delta.float(), index, coef=opts.rcc_coef, bound=opts.rcc_bound
                )
            rows = [r for r in group_rows(index) if len(r) > 1]
            shift = torch.cat(
                [baseline[r] - rewards[r].float().mean() for r in rows] or [torch.zeros(1)]
            )
            out["crlvr/rcc/baseline_shift_mean"] = shift.mean().item()
            out["crlvr/rcc/baseline_shift_max_abs"] = shift.abs().max().item()
            out["crlvr/rcc/delta_mean"] = delta.float().mean().item()
        if spec.contrastive:
            out["crlvr/conspo/margin"] = float(
                conspo_margin(
                    self._progress(), max_margin=opts.conspo_max_margin, warmup=opts.conspo_warmup
                )
            )
        return out

    def _progress(self) -> float:
        """Training progress in [0, 1]: steps done / total steps (verl counts from 1)."""
        total = max(int(getattr(self, "total_training_steps", 0) or 0), 1)
        return min(max(self.global_steps - 1, 0) / total, 1.0)


def _collapse_rate(rewards: torch.Tensor, index: list[str]) -> float:
    """Share of groups (of two or more rows) whose rewards are all equal (no gradient)."""
    rows = [r for r in group_rows(index) if len(r) > 1]
    if not rows:
        return 0.0
    return sum(float(collapse_rate(rewards[r], len(r))) for r in rows) / len(rows)
