"""The objectives a loss calls on the policy log-probs: :class:`PolicyObjective` (the
registry's policy losses, with the token-level methods' options, :func:`reco_options` and
:func:`oc_options`) and :class:`ContrastiveObjective` (ConSPO)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...algorithms import (
    Recipe,
    conspo_loss,
    conspo_margin,
    corrected_advantages,
    get_policy_loss,
    loss_option_names,
    policy_loss,
    rcc_baseline,
    row_weights,
)
from .context import LossContext, Metrics, old_logps
from .corrections import LossTimeRCC, SamplingCorrection, rcc_advantages_of

#: The batch entries ReCo's options read (the stage's weights and normalisers).
RECO_READS = (
    "data.reco_weights", "data.reco_weight_sum", "data.reco_weighted_tokens",
    "data.reco_variance_mean?",
)  # fmt: skip


def reco_options(
    factor_norm: str, factor: str = "variance", vocab_size: int | None = None
) -> Callable[[dict, LossContext], dict]:
    """ReCo's loss options: weights and the whole window's normalisers, per process; with
    the entropy factor, the loss forward's entropies (``policy_entropy``) and V."""

    def options(inputs: dict, ctx: LossContext) -> dict:
        # The whole window's weighted counts, per process (DDP averages the gradients).
        share = ctx.accum / (ctx.steps_per_generation * ctx.num_processes)
        out = {
            "weights": inputs["reco_weights"],
            "factor_norm": factor_norm,
            "num_rows": inputs["reco_weight_sum"] * share,
            "num_tokens": (inputs["reco_weighted_tokens"] * share).clamp(min=1),
        }
        if "reco_variance_mean" in inputs:
            out["variance_mean"] = inputs["reco_variance_mean"]
        if factor == "entropy":
            # Z of factor_norm="mean" is then this micro-batch's mean entropy (docs).
            out |= {"factor": "entropy", "entropy": inputs["policy_entropy"]}
            out["vocab_size"] = vocab_size
        return out

    return options


def oc_options(max_weight: float, level: str) -> Callable[[dict, LossContext], dict]:
    """OC-GRPO's loss options: the guided rows and the importance-weight truncation."""

    def options(inputs: dict, ctx: LossContext) -> dict:
        return {"guided": inputs.get("oc_guided"), "max_weight": max_weight, "level": level}

    return options


class PolicyObjective:
    """A registry policy loss (:func:`contrastive_rlvr.algorithms.policy_loss`) with the
    recipe's clip bounds and aggregation unless overridden, KL, and the normalisers that
    make the summed micro-batch losses equal the loss of the whole window."""

    def __init__(
        self,
        name: str,
        recipe: Recipe,
        *,
        defaults: dict[str, Any],
        beta: float,
        clip_low: float | None,
        clip_high: float | None,
        agg: str | None,
        max_len: int,
        eps: float,
        rcc: LossTimeRCC | None = None,
        extra: Callable[[dict, LossContext], dict] | None = None,
        correction: SamplingCorrection | None = None,
        extra_reads: tuple[str, ...] = (),
    ) -> None:
        self.name, self.recipe, self.accepted = name, recipe, loss_option_names(name)
        normaliser = ("data.num_items_in_batch",) if "num_tokens" in self.accepted else ()
        self.reads = (
            "data.completion_ids", "data.completion_mask", "data.advantages",
            "data.old_per_token_logps?", "data.ref_per_token_logps?", *normaliser,
            *extra_reads, *(rcc.reads if rcc else ()), *(correction.reads if correction else ()),
        )  # fmt: skip
        self.correction = correction
        self.per_row = get_policy_loss(name).per_row_advantages_only
        self.fixed: dict[str, Any] = {**defaults, "beta": beta}
        for key, value in (("clip_low", clip_low), ("clip_high", clip_high)):
            if value is not None:
                self.fixed[key] = value
        if agg is not None and "agg" in self.accepted:
            self.fixed["agg"] = agg
        if "max_len" in self.accepted:
            self.fixed["max_len"] = max_len
        self.eps, self.rcc, self.extra = eps, rcc, extra

    def options(self, inputs: dict, ctx: LossContext, ref_key: str) -> dict[str, Any]:
        out = {**self.fixed, "ref_logp": inputs.get(ref_key)}
        out["num_rows"] = inputs["completion_ids"].size(0) * ctx.accum
        if "num_tokens" in self.accepted:
            # num_items_in_batch counts the generation batch of every process; DDP averages
            # the processes' gradients, so each one divides by its share of the window.
            window = inputs["num_items_in_batch"] / ctx.num_processes
            out["num_tokens"] = (window * ctx.accum / ctx.steps_per_generation).clamp(min=1)
        if self.extra is not None:
            out.update(self.extra(inputs, ctx))
        return out

    def __call__(
        self,
        logp: torch.Tensor,
        inputs: dict,
        ctx: LossContext,
        *,
        plain: bool = False,
        delta: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Metrics]:
        """``plain``: the plain-prompt share of BiCC's mix (its own old / reference).
        ``delta``: RCC's (B,) delta when the caller has it (BiCC: the plain prompt's,
        :meth:`Loss.rcc_delta`); else taken from ``logp`` (a plain-prompt forward)."""
        mask = inputs["completion_mask"]
        prefix = "plain_" if plain else ""
        old = old_logps(logp, inputs, prefix + "old_per_token_logps")
        advantages, rcc_metrics = inputs["advantages"], {}
        if delta is None and self.rcc is not None:
            delta = self.rcc.delta(logp, inputs, old)
        if delta is not None:
            advantages = rcc_advantages_of(self.recipe, self.rcc, inputs, delta, ctx, self.eps)
            rcc_metrics = self.rcc.metrics(inputs, delta, ctx.group_size)
        if self.correction is not None:
            # TRL's per_token_loss * w equals the surrogate with advantages A * w (w >= 0).
            weights = self.correction.weights(logp, inputs, old, advantages, mask, plain=plain)
            if weights is not None:
                advantages = corrected_advantages(advantages, weights, mask, per_row=self.per_row)
        options = self.options(inputs, ctx, prefix + "ref_per_token_logps")
        loss, metrics = policy_loss(self.name, logp, old, advantages, mask, **options)
        return loss, {**metrics, **rcc_metrics}


class ContrastiveObjective:
    """ConSPO's loss (:func:`contrastive_rlvr.algorithms.conspo_loss`) with its margin
    schedule; the per-row cut is the reward threshold, or RCC's baseline b*."""

    name = "conspo"

    def __init__(
        self,
        *,
        tau: float,
        max_margin: float,
        warmup: float,
        threshold: float,
        rcc: LossTimeRCC | None = None,
        correction: SamplingCorrection | None = None,
    ) -> None:
        self.tau, self.max_margin, self.warmup = tau, max_margin, warmup
        self.threshold, self.rcc, self.correction = threshold, rcc, correction
        self.reads = (
            "data.completion_mask", "data.rewards", "data.conspo_groups",
            "data.conspo_baseline?", "data.old_per_token_logps?",
            *(rcc.reads if rcc else ()), *(correction.reads if correction else ()),
        )  # fmt: skip

    def __call__(
        self,
        logp: torch.Tensor,
        inputs: dict,
        ctx: LossContext,
        *,
        plain: bool = False,
        delta: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Metrics]:
        """``plain``: the plain-prompt share of BiCC's mix. ``delta``: as in
        :class:`PolicyObjective` (BiCC: the plain prompt's, the same for both shares).

        The sum over usable groups is divided by the generation batch's count of usable
        groups (``conspo_groups``, all processes) times this micro-batch's share of it, as
        the policy recipes' normalisers are: the gradient of a window does not depend on
        how it is split into micro-batches or processes."""
        baseline, rcc_metrics = inputs.get("conspo_baseline"), {}
        key = "plain_old_per_token_logps" if plain else "old_per_token_logps"
        if self.rcc is not None:
            if delta is None:
                delta = self.rcc.delta(logp, inputs, old_logps(logp, inputs, key))
            if delta is not None:
                baseline = rcc_baseline(
                    inputs["rewards"],
                    delta,
                    ctx.group_size,
                    coef=self.rcc.coef,
                    bound=self.rcc.bound,
                )
                rcc_metrics = self.rcc.metrics(inputs, delta, ctx.group_size)
        margin = conspo_margin(ctx.progress, max_margin=self.max_margin, warmup=self.warmup)
        weights = None
        if self.correction is not None:
            mask = inputs["completion_mask"]
            cut = self.threshold if baseline is None else baseline
            sign = torch.where(inputs["rewards"] > cut, 1.0, -1.0)  # positives count as A >= 0
            token_weights = self.correction.weights(
                logp, inputs, old_logps(logp, inputs, key), sign, mask, plain=plain
            )
            if token_weights is not None:
                weights = row_weights(token_weights, mask)
        loss, metrics = conspo_loss(
            logp,
            inputs["completion_mask"],
            inputs["rewards"],
            ctx.group_size,
            tau=self.tau,
            margin=margin,
            threshold=self.threshold,
            baseline=baseline,
            num_groups=self.window_groups(inputs, ctx),
            row_weights=weights,
        )
        return loss, {**metrics, **rcc_metrics}

    @staticmethod
    def window_groups(inputs: dict, ctx: LossContext) -> torch.Tensor | float:
        """This micro-batch's share of the window's usable groups: the generation batch's
        count x accum / (steps_per_generation x processes), so that the micro-batch losses
        of an optimizer step sum to the window's mean (DDP averages the processes)."""
        share = ctx.accum / (ctx.steps_per_generation * ctx.num_processes)
        return (inputs["conspo_groups"] * share).clamp(min=share)
