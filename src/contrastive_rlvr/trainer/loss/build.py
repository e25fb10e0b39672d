"""The loss objects the trainer calls (:class:`Loss`, :class:`MixedLoss` for BiCC's
``bicc_mix < 1``, :class:`TRLLoss` for TRL's own loss) and :func:`build_loss`, which
chooses one from the config."""

from __future__ import annotations

from typing import Any

import torch

from ...algorithms import Recipe, token_method_loss
from ..trl_settings import uses_trl_loss
from .context import (
    OPTIONAL_READS,
    LossContext,
    Metrics,
    PolicyLogps,
    old_logps,
    without_tool_tokens,
)
from .corrections import (
    RCC_REFERENCE_KEY,
    LossTimeRCC,
    SamplingCorrection,
    mask_sampling_logps,
    rcc_advantages_of,
)
from .distill import DistillLoss
from .objectives import (
    RECO_READS,
    ContrastiveObjective,
    PolicyObjective,
    oc_options,
    reco_options,
)


class Loss:
    """The policy log-prob pass then the objective. ``entropy``: the objective reads the
    pass's per-token entropies (ReCo's entropy factor) as ``policy_entropy``. ``reads``:
    the batch entries it reads, checked against the stages' writes when they are built."""

    def __init__(
        self,
        logps: PolicyLogps,
        objective: PolicyObjective | ContrastiveObjective,
        *,
        entropy: bool = False,
    ) -> None:
        self.logps, self.objective, self.entropy = logps, objective, entropy
        self.name = objective.name
        self.plain_logps = PolicyLogps(conditioned=False)
        # RCC's sampling delta under BiCC reads the plain prompt's pi_old (rcc_delta).
        self.reads = (*logps.reads, *objective.reads, *OPTIONAL_READS)
        self.reads += ("data.plain_old_per_token_logps?",)

    def rcc_delta(
        self,
        model,
        inputs: dict,
        ctx: LossContext,
        plain_logp: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """RCC's sampling delta (B,) under BiCC: the policy's shift on the plain prompt,
        ``log pi_theta(o | q) - log pi_old(o | q)``, never the context's shift (docs/rcc.md).
        ``plain_logp``: the plain forward's log-probs when the loss has one (``bicc_mix <
        1``). The stage keeps pi_old(o | q) as ``plain_old_per_token_logps`` only off
        policy; on policy pi_theta is pi_old, so delta is 0 without a forward. None: not
        RCC's sampling reference (the frozen one's delta is the stages')."""
        rcc = getattr(self.objective, "rcc", None)
        if "bicc_prompt_ids" not in inputs or rcc is None or rcc.reference != "sampling":
            return None
        old = inputs.get("plain_old_per_token_logps")
        if old is None and plain_logp is None:
            return torch.zeros(
                inputs["completion_ids"].size(0), device=inputs["completion_ids"].device
            )
        if plain_logp is None:
            with torch.no_grad():
                plain_logp = self.plain_logps(model, inputs, ctx)
        return rcc.delta(
            plain_logp, inputs, old_logps(plain_logp, inputs, "plain_old_per_token_logps")
        )

    def policy_pass(
        self,
        logps: PolicyLogps,
        model,
        inputs: dict,
        ctx: LossContext,
    ) -> tuple[torch.Tensor, dict]:
        """The log-probs (B, T) and the objective's inputs (tool tokens folded in)."""
        if not self.entropy:
            return logps(model, inputs, ctx), without_tool_tokens(inputs)
        logp, entropies = logps(model, inputs, ctx, entropy=True)
        return logp, {**without_tool_tokens(inputs), "policy_entropy": entropies}

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:
        logp, objective_inputs = self.policy_pass(self.logps, model, inputs, ctx)
        # BiCC's conditioned_old mode: the loss forward is the plain prompt's already.
        plain = None if self.logps.conditioned else logp
        delta = self.rcc_delta(model, inputs, ctx, plain)
        extra = {} if delta is None else {"delta": delta}
        return self.objective(logp, objective_inputs, ctx, **extra)


class TRLLoss:
    """TRL's own ``_compute_loss`` on the micro-batch the stages prepared (the recipe's
    TRL settings are in the config, :mod:`~contrastive_rlvr.trainer.trl_settings`). With
    BiCC (``bicc_mix`` 1) the policy reads the conditioned prompt: TRL's loss takes
    ``prompt_ids`` / ``prompt_mask`` from the inputs, so they are BiCC's; old / reference
    log-probs are the stages' (the ratio mode's). TRL logs its own metrics; only RCC's
    loss-time delta diagnostics are returned here.

    RCC at loss time (:class:`LossTimeRCC`, the frozen reference): TRL's loss reads
    ``inputs["advantages"]`` after its policy forward, so the forward's log-probs are handed
    to ``on_logps``, which sets the RCC advantages of the micro-batch before TRL reads them.
    """

    #: ``__call__`` takes ``watch`` (BiCC's distill form reads the forward's log-probs).
    takes_watch = True

    def __init__(
        self,
        name: str,
        *,
        conditioned: bool,
        recipe: Recipe | None = None,
        rcc: LossTimeRCC | None = None,
        eps: float = 1e-6,
    ) -> None:
        self.name, self.conditioned = name, conditioned
        self.recipe, self.rcc, self.eps = recipe, rcc, eps
        # The prompt the policy reads (the diagnostics' per-row gradients use the same one).
        self.logps = PolicyLogps(conditioned=conditioned)
        self.reads = (
            *self.logps.reads, "data.advantages", "data.num_items_in_batch",
            "data.old_per_token_logps?", "data.ref_per_token_logps?", *OPTIONAL_READS,
            *SamplingCorrection.reads, *(rcc.reads if rcc else ()),
        )  # fmt: skip

    def __call__(
        self, model, inputs: dict, ctx: LossContext, *, watch=None
    ) -> tuple[torch.Tensor, Metrics]:
        """``watch(logp)``: called with the policy forward's log-probs (B, T), with
        gradient (BiCC's distill form adds its term through them)."""
        inputs = dict(inputs)  # the micro-batch stays as the stages left it
        if self.conditioned:
            ids, mask = self.logps.keys
            inputs.update(prompt_ids=inputs[ids], prompt_mask=inputs[mask])
        metrics: Metrics = {}
        rcc = self.rcc is not None and RCC_REFERENCE_KEY in inputs
        # BiCC with the off-policy mask: TRL's mask reads ``sampling_per_token_logps``, put
        # on the loss's prompt here (:func:`mask_sampling_logps`) once the forward is known.
        mask = "bicc_mask_sampling_shift" in inputs

        def on_logps(logp: torch.Tensor) -> None:
            if watch is not None:
                watch(logp)
            if mask:
                inputs["sampling_per_token_logps"] = mask_sampling_logps(inputs, logp)
            if rcc:
                delta = self.rcc.delta(logp, inputs, None)
                inputs["advantages"] = rcc_advantages_of(
                    self.recipe, self.rcc, inputs, delta, ctx, self.eps
                )
                metrics.update(self.rcc.metrics(inputs, delta, ctx.group_size))

        hook = on_logps if rcc or mask or watch is not None else None
        loss = ctx.trl_loss(model, inputs, conditioned=self.conditioned, on_logps=hook)
        return loss, metrics


class MixedLoss(Loss):
    """BiCC with ``mix < 1``: ``mix`` x the loss on the conditioned prompts plus
    ``1 - mix`` x the same loss (policy or ConSPO) on the plain prompts (this project's
    option, docs/bicc.md); the metrics are the conditioned share's. RCC's sampling delta
    is the plain forward's, the same for both shares."""

    def __init__(
        self,
        objective: PolicyObjective | ContrastiveObjective,
        mix: float,
        *,
        entropy: bool = False,
    ) -> None:
        super().__init__(PolicyLogps(conditioned=True), objective, entropy=entropy)
        self.mix = mix
        self.reads += (*self.plain_logps.reads, "data.plain_ref_per_token_logps?")

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:
        plain_logp, plain_inputs = self.policy_pass(self.plain_logps, model, inputs, ctx)
        delta = self.rcc_delta(model, inputs, ctx, plain_logp)
        extra = {} if delta is None else {"delta": delta}
        plain, _ = self.objective(plain_logp, plain_inputs, ctx, plain=True, **extra)
        logp, objective_inputs = self.policy_pass(self.logps, model, inputs, ctx)
        loss, metrics = self.objective(logp, objective_inputs, ctx, **extra)
        return self.mix * loss + (1.0 - self.mix) * plain, metrics


def build_loss(cfg, recipe: Recipe, model: Any = None) -> Loss | TRLLoss:
    """The loss of a run, from its config (an
    :class:`~contrastive_rlvr.trainer.config.RLVRConfig`): TRL's for the recipes TRL has
    (:func:`~contrastive_rlvr.trainer.trl_settings.uses_trl_loss`), else the project's.
    ``model``: the policy, for its vocabulary size (ReCo's entropy factor, ``max`` norm)."""
    rcc = None
    if cfg.rcc:
        rcc = LossTimeRCC(
            coef=cfg.rcc_coef,
            reduce=cfg.rcc_delta,
            bound=cfg.rcc_bound,
            reference=cfg.rcc_reference,
            threshold=cfg.reward_threshold,
        )
    # BiCC's conditioned_old ratio mode and its distill form: the policy reads the plain prompt.
    distill = cfg.bicc and cfg.bicc_form == "distill"
    conditioned = cfg.bicc and not distill and cfg.bicc_ratio_mode != "conditioned_old"
    base = _base_loss(cfg, recipe, rcc, model, conditioned)
    if not distill:
        return base
    return DistillLoss(
        base,
        weight=cfg.bicc_distill_weight,
        is_clip=cfg.bicc_distill_is_clip,
        max_gap=cfg.bicc_distill_max_gap,
        center=cfg.bicc_distill_center,
    )


def _base_loss(cfg, recipe: Recipe, rcc, model: Any, conditioned: bool) -> Loss | TRLLoss:
    if uses_trl_loss(cfg):
        name = recipe.loss or cfg.recipe
        return TRLLoss(name, conditioned=conditioned, recipe=recipe, rcc=rcc, eps=cfg.adv_eps)
    if recipe.objective == "contrastive":
        objective = ContrastiveObjective(
            tau=cfg.conspo_tau,
            max_margin=cfg.conspo_max_margin,
            warmup=cfg.conspo_warmup,
            threshold=cfg.reward_threshold,
            rcc=rcc,
            correction=SamplingCorrection.from_config(cfg),
        )
    else:
        objective = _policy_objective(cfg, recipe, rcc, _vocab_size(model))
    entropy = cfg.reco and cfg.reco_factor == "entropy"
    if conditioned and cfg.bicc_mix < 1.0:
        return MixedLoss(objective, cfg.bicc_mix, entropy=entropy)
    return Loss(PolicyLogps(conditioned=conditioned), objective, entropy=entropy)


def _vocab_size(model: Any) -> int | None:
    config = getattr(model, "config", None)
    return None if config is None else config.get_text_config().vocab_size


def _policy_objective(
    cfg, recipe: Recipe, rcc: LossTimeRCC | None, vocab_size: int | None = None
) -> PolicyObjective:
    name, defaults = token_method_loss(
        cfg.recipe, verigate=cfg.verigate, reco=cfg.reco, oc_grpo=cfg.oc_grpo
    )
    extra, reads = None, ()
    if cfg.reco:
        extra = reco_options(cfg.reco_factor_norm, cfg.reco_factor, vocab_size)
        reads = RECO_READS
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
        rcc=rcc,
        extra=extra,
        correction=SamplingCorrection.from_config(cfg),
        extra_reads=reads,
    )
