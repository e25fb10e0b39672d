"""The loss side of the trainer: the policy log-prob pass and the objective, chosen
once from the config (:func:`build_loss`), called by ``RLVRTrainer._compute_loss``.

A :class:`Loss` is ``(model, inputs, ctx) -> (loss, metrics)`` on one micro-batch,
already scaled for gradient accumulation. It is made of

- a :class:`PolicyLogps` pass: log pi_theta(o | prompt) on the plain prompt or on
  BiCC's conditioned one (then encoding each distinct prompt once, see
  :mod:`.prefix`);
- an objective: :class:`PolicyObjective` (the registry's policy losses, with the
  seed methods' options) or :class:`ContrastiveObjective` (ConSPO);
- with BiCC's ``bicc_mix < 1``, a :class:`MixedLoss` that puts that share on the
  conditioned prompts and the rest on the plain ones.

For the recipes TRL has (:mod:`.trl_settings`), :class:`TRLLoss` runs TRL's own
``GRPOTrainer._compute_loss`` on the inputs the stages prepared (advantages, old /
reference log-probs; BiCC's conditioned prompt ids in place of ``prompt_ids``), so TRL's
loss-side features (vLLM importance sampling, ``tool_mask``, entropy bonus, MoE router
loss, top-entropy mask, ``delta``) apply as in TRL. The project's loss honours
``tool_mask`` (tool-response tokens get no gradient) and, in the trainer, the router
loss; the config rejects TRL's other loss options with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms import (
    Recipe,
    conspo_loss,
    conspo_margin,
    loss_option_names,
    policy_loss,
    rcc_baseline,
    recipe_advantages,
    seed_method_loss,
    sequence_delta,
)
from .trl_settings import uses_trl_loss

logger = logging.getLogger(__name__)

Metrics = dict[str, torch.Tensor]


@dataclass
class LossContext:
    """What a loss may use besides the micro-batch.

    Attributes:
        logps: ``(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
            share_prefix=False)`` -> (B, T) per-token log-probs, with gradient.
        group_size: G.
        accum: micro-batches in this optimizer step (the loss is divided by it).
        steps_per_generation: micro-batches per generation batch.
        num_processes: data-parallel processes (DDP averages their gradients).
        progress: training progress in [0, 1] (ConSPO's margin schedule).
        trl_loss: ``(model, inputs) -> loss``, TRL's ``_compute_loss`` (for :class:`TRLLoss`).
    """

    logps: Callable[..., torch.Tensor]
    group_size: int
    accum: int = 1
    steps_per_generation: int = 1
    num_processes: int = 1
    progress: float = 0.0
    trl_loss: Callable[[Any, dict], torch.Tensor] | None = None


class PolicyLogps:
    """log pi_theta(o | prompt) (B, T) on the plain prompt or on the conditioned one."""

    def __init__(self, *, conditioned: bool) -> None:
        self.conditioned = conditioned
        prefix = "bicc_" if conditioned else ""
        self.keys = (f"{prefix}prompt_ids", f"{prefix}prompt_mask")

    def __call__(self, model: torch.nn.Module, inputs: dict, ctx: LossContext) -> torch.Tensor:
        ids, mask = inputs[self.keys[0]], inputs[self.keys[1]]
        return ctx.logps(
            model,
            ids,
            mask,
            inputs["completion_ids"],
            inputs["completion_mask"],
            share_prefix=self.conditioned,
        )


def old_logps(logp: torch.Tensor, inputs: dict, key: str = "old_per_token_logps") -> torch.Tensor:
    """log pi_old (B, T): the batch's, or the detached current log-probs on-policy; OC-GRPO's
    guided rows take their sampling log-probs log pi_old(o | q, hint)."""
    old = inputs.get(key)
    old = logp.detach() if old is None else old
    if "oc_guided" in inputs:
        old = torch.where(inputs["oc_guided"].unsqueeze(1), inputs["oc_sampling_logps"], old)
    return old


@dataclass
class SamplingRCC:
    """RCC with the sampling policy as pi_ref: delta = log pi_theta - log pi_old, taken at
    loss time (whole groups per micro-batch)."""

    coef: float
    reduce: str
    bound: str = "reward_range"

    def delta(self, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return sequence_delta(logp.detach(), old, mask, reduce=self.reduce)


def reco_options(factor_norm: str) -> Callable[[dict, LossContext], dict]:
    """ReCo's loss options: weights and the whole window's normalisers, per process."""

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
        sampling_rcc: SamplingRCC | None = None,
        extra: Callable[[dict, LossContext], dict] | None = None,
    ) -> None:
        self.name, self.recipe, self.accepted = name, recipe, loss_option_names(name)
        self.fixed: dict[str, Any] = {**defaults, "beta": beta}
        for key, value in (("clip_low", clip_low), ("clip_high", clip_high)):
            if value is not None:
                self.fixed[key] = value
        if agg is not None and "agg" in self.accepted:
            self.fixed["agg"] = agg
        if "max_len" in self.accepted:
            self.fixed["max_len"] = max_len
        self.eps, self.sampling_rcc, self.extra = eps, sampling_rcc, extra

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
        self, logp: torch.Tensor, inputs: dict, ctx: LossContext, *, plain: bool = False
    ) -> tuple[torch.Tensor, Metrics]:
        """``plain``: the plain-prompt share of BiCC's mix (its own old / reference)."""
        mask = inputs["completion_mask"]
        prefix = "plain_" if plain else ""
        old = old_logps(logp, inputs, prefix + "old_per_token_logps")
        advantages = inputs["advantages"]
        if self.sampling_rcc is not None and not plain:
            delta = self.sampling_rcc.delta(logp, old, mask)
            advantages = recipe_advantages(
                self.recipe,
                inputs["rewards"],
                ctx.group_size,
                delta=delta,
                rcc_coef=self.sampling_rcc.coef,
                rcc_bound=self.sampling_rcc.bound,
                eps=self.eps,
            )
        options = self.options(inputs, ctx, prefix + "ref_per_token_logps")
        return policy_loss(self.name, logp, old, advantages, mask, **options)


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
        sampling_rcc: SamplingRCC | None = None,
    ) -> None:
        self.tau, self.max_margin, self.warmup = tau, max_margin, warmup
        self.threshold, self.sampling_rcc = threshold, sampling_rcc

    def __call__(
        self, logp: torch.Tensor, inputs: dict, ctx: LossContext, *, plain: bool = False
    ) -> tuple[torch.Tensor, Metrics]:
        """``plain``: the plain-prompt share of BiCC's mix (RCC's sampling delta then
        against the plain prompt's pi_old)."""
        baseline = inputs.get("conspo_baseline")
        if self.sampling_rcc is not None:
            mask = inputs["completion_mask"]
            key = "plain_old_per_token_logps" if plain else "old_per_token_logps"
            delta = self.sampling_rcc.delta(logp, old_logps(logp, inputs, key), mask)
            baseline = rcc_baseline(
                inputs["rewards"],
                delta,
                ctx.group_size,
                coef=self.sampling_rcc.coef,
                bound=self.sampling_rcc.bound,
            )
        margin = conspo_margin(ctx.progress, max_margin=self.max_margin, warmup=self.warmup)
        loss, metrics = conspo_loss(
            logp,
            inputs["completion_mask"],
            inputs["rewards"],
            ctx.group_size,
            tau=self.tau,
            margin=margin,
            threshold=self.threshold,
            baseline=baseline,
        )
        return loss / ctx.accum, metrics


def without_tool_tokens(inputs: dict) -> dict:
    """The micro-batch with TRL's ``tool_mask`` (B, T; 0 on tool-response tokens) folded
    into the objective's ``completion_mask``: those tokens are context, not the policy's
    output, so they get no gradient (as in TRL's loss). The forward keeps the full mask."""
    if "tool_mask" not in inputs:
        return inputs
    return {**inputs, "completion_mask": inputs["completion_mask"] * inputs["tool_mask"]}


class Loss:
    """The policy log-prob pass then the objective."""

    def __init__(self, logps: PolicyLogps, objective: PolicyObjective | ContrastiveObjective):
        self.logps, self.objective = logps, objective
        self.name = objective.name

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:  # noqa: ANN001
        return self.objective(self.logps(model, inputs, ctx), without_tool_tokens(inputs), ctx)


class TRLLoss:
    """TRL's own ``_compute_loss`` on the micro-batch the stages prepared (the recipe's
    TRL settings are in the config, :mod:`.trl_settings`). With BiCC (``bicc_mix`` 1) the
    policy reads the conditioned prompt: TRL's loss takes ``prompt_ids`` / ``prompt_mask``
    from the inputs, so they are BiCC's; old / reference log-probs are the stages' (the
    ratio mode's). TRL logs its own metrics; none are returned here."""

    def __init__(self, name: str, *, conditioned: bool) -> None:
        self.name, self.conditioned = name, conditioned
        # The prompt the policy reads (the diagnostics' per-row gradients use the same one).
        self.logps = PolicyLogps(conditioned=conditioned)

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:  # noqa: ANN001
        if self.conditioned:
            ids, mask = self.logps.keys
            inputs = {**inputs, "prompt_ids": inputs[ids], "prompt_mask": inputs[mask]}
        return ctx.trl_loss(model, inputs), {}


class MixedLoss(Loss):
    """BiCC with ``mix < 1``: ``mix`` x the loss on the conditioned prompts plus
    ``1 - mix`` x the same loss (policy or ConSPO) on the plain prompts (this project's
    option, docs/bicc.md); the metrics are the conditioned share's."""

    def __init__(self, objective: PolicyObjective | ContrastiveObjective, mix: float) -> None:
        super().__init__(PolicyLogps(conditioned=True), objective)
        self.plain_logps, self.mix = PolicyLogps(conditioned=False), mix

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:  # noqa: ANN001
        loss, metrics = super().__call__(model, inputs, ctx)
        plain_logp = self.plain_logps(model, inputs, ctx)
        plain, _ = self.objective(plain_logp, without_tool_tokens(inputs), ctx, plain=True)
        return self.mix * loss + (1.0 - self.mix) * plain, metrics


def build_loss(cfg, recipe: Recipe) -> Loss | TRLLoss:  # noqa: ANN001
    """The loss of a run, from its config (an :class:`~.config.RLVRConfig`): TRL's for
    the recipes TRL has (:func:`~.trl_settings.uses_trl_loss`), else the project's."""
    if uses_trl_loss(cfg):
        if cfg.bicc and cfg.share_prefix:
            # Said, not ignored: TRL's loss forwards every row whole (same values).
            logger.warning(
                "share_prefix=True has no effect with recipe %s and BiCC: TRL's loss "
                "forwards each conditioned row whole (docs/performance.md)",
                cfg.recipe,
            )
        return TRLLoss(recipe.loss or cfg.recipe, conditioned=cfg.bicc)
    sampling_rcc = None
    if cfg.rcc and cfg.rcc_reference == "sampling":
        sampling_rcc = SamplingRCC(coef=cfg.rcc_coef, reduce=cfg.rcc_delta, bound=cfg.rcc_bound)
    if recipe.objective == "contrastive":
        objective = ContrastiveObjective(
            tau=cfg.conspo_tau,
            max_margin=cfg.conspo_max_margin,
            warmup=cfg.conspo_warmup,
            threshold=cfg.reward_threshold,
            sampling_rcc=sampling_rcc,
        )
    else:
        objective = _policy_objective(cfg, recipe, sampling_rcc)
    if cfg.bicc and cfg.bicc_mix < 1.0:
        return MixedLoss(objective, cfg.bicc_mix)
    return Loss(PolicyLogps(conditioned=cfg.bicc), objective)


def _policy_objective(cfg, recipe: Recipe, sampling_rcc: SamplingRCC | None) -> PolicyObjective:  # noqa: ANN001
    name, defaults = seed_method_loss(
        cfg.recipe, verigate=cfg.verigate, reco=cfg.reco, oc_grpo=cfg.oc_grpo
    )
    extra = None
    if cfg.reco:
        extra = reco_options(cfg.reco_factor_norm)
    elif cfg.oc_grpo:
        extra = oc_options(cfg.oc_max_weight, cfg.oc_weight_level)
    return PolicyObjective(
        name,
        recipe,
        defaults=defaults,
        beta=cfg.beta,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        agg=cfg.loss_agg,
        max_len=cfg.max_completion_length,
        eps=cfg.adv_eps,
        sampling_rcc=sampling_rcc,
        extra=extra,
    )
