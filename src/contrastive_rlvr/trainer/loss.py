"""The loss side of the trainer: the policy log-prob pass and the objective, chosen
once from the config (:func:`build_loss`), called by ``RLVRTrainer._compute_loss``.

A :class:`Loss` is ``(model, inputs, ctx) -> (loss, metrics)`` on one micro-batch,
already scaled for gradient accumulation. It is made of

- a :class:`PolicyLogps` pass: log pi_theta(o | prompt) on the plain prompt or on
  BiCC's conditioned one (then encoding each distinct prompt once, see
  :mod:`~contrastive_rlvr.shared_forward.prefix`);
- an objective: :class:`PolicyObjective` (the registry's policy losses, with the
  token-level methods' options) or :class:`ContrastiveObjective` (ConSPO);
- with BiCC's ``bicc_mix < 1``, a :class:`MixedLoss` that puts that share on the
  conditioned prompts and the rest on the plain ones.

For the recipes TRL has (:mod:`.trl_settings`), :class:`TRLLoss` runs TRL's own
``GRPOTrainer._compute_loss`` on the inputs the stages prepared (advantages, old /
reference log-probs; BiCC's conditioned prompt ids in place of ``prompt_ids``), so TRL's
loss-side features (vLLM importance sampling, ``tool_mask``, entropy bonus, MoE router
loss, top-entropy mask, ``delta``) apply as in TRL. The project's loss honours
``tool_mask`` (tool-response tokens get no gradient), vLLM's importance-sampling
correction and the off-policy mask as TRL applies them (:class:`SamplingCorrection`) and,
in the trainer, the router loss; the config rejects TRL's other loss options with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms import (
    Recipe,
    conspo_loss,
    conspo_margin,
    corrected_advantages,
    get_policy_loss,
    loss_option_names,
    off_policy_mask,
    policy_loss,
    rcc_baseline,
    recipe_advantages,
    row_weights,
    sequence_delta,
    token_method_loss,
)
from ..algorithms.diagnostics import delta_metrics
from .trl_settings import uses_trl_loss

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
        trl_loss: ``(model, inputs, conditioned=False, on_logps=None) -> loss``, TRL's
            ``_compute_loss`` (for :class:`TRLLoss`), its forward told whether the prompts
            are conditioned; ``on_logps(logps)`` is called with its policy forward's
            log-probs (B, T) before TRL reads the advantages.
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

    def __call__(
        self, model: torch.nn.Module, inputs: dict, ctx: LossContext, *, entropy: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, T) log-probs; with ``entropy``, and the forward's per-token entropies (B, T)."""
        ids, mask = inputs[self.keys[0]], inputs[self.keys[1]]
        tensors = (ids, mask, inputs["completion_ids"], inputs["completion_mask"])
        if entropy:
            return ctx.logps(model, *tensors, share_prefix=self.conditioned, entropy=True)
        return ctx.logps(model, *tensors, share_prefix=self.conditioned)


def rcc_advantages_of(
    recipe: Recipe,
    rcc: LossTimeRCC,
    inputs: dict,
    delta: torch.Tensor,
    ctx: LossContext,
    eps: float,
) -> torch.Tensor:
    """The recipe's RCC-corrected advantages (B,) of the micro-batch's whole groups."""
    return recipe_advantages(
        recipe,
        inputs["rewards"],
        ctx.group_size,
        delta=delta,
        rcc_coef=rcc.coef,
        rcc_bound=rcc.bound,
        eps=eps,
    )


def old_logps(logp: torch.Tensor, inputs: dict, key: str = "old_per_token_logps") -> torch.Tensor:
    """log pi_old (B, T): the batch's, or the detached current log-probs on-policy; OC-GRPO's
    guided rows take their sampling log-probs log pi_old(o | q, hint)."""
    old = inputs.get(key)
    old = logp.detach() if old is None else old
    if "oc_guided" in inputs:
        old = torch.where(inputs["oc_guided"].unsqueeze(1), inputs["oc_sampling_logps"], old)
    return old


#: The frozen reference's log-probs (B, T) the stages leave for RCC's delta at loss time.
RCC_REFERENCE_KEY = "rcc_ref_per_token_logps"


@dataclass
class LossTimeRCC:
    """RCC whose delta is taken at loss time from the loss forward's own (detached)
    log pi_theta(o | q), over the whole groups of the micro-batch:

    - ``reference="sampling"`` (``rcc_reference='sampling'``): delta = log pi_theta -
      log pi_old;
    - ``reference="reference"`` (``rcc_reference='reference'``): delta = log pi_theta -
      log pi_ref with the stages'
      ``RCC_REFERENCE_KEY``, left on on-policy batches (``rcc_delta_pass='auto'``) instead
      of a separate no-grad policy pass. On policy the loss's pi_theta is the sampling
      policy, so these are the advantages the stage would have computed. Without the key
      the stage's advantages stand (:meth:`delta` gives None).
    """

    coef: float
    reduce: str
    bound: str = "reward_range"
    reference: str = "sampling"
    threshold: float = 0.5  # for the delta diagnostics of correct vs wrong rows

    def delta(
        self, logp: torch.Tensor, inputs: dict, old: torch.Tensor | None
    ) -> torch.Tensor | None:
        """(B,) delta of the micro-batch's rows, or None (the stages' advantages stand)."""
        base = old if self.reference == "sampling" else inputs.get(RCC_REFERENCE_KEY)
        if base is None:
            return None
        mask = inputs.get("forward_completion_mask", inputs["completion_mask"])
        return sequence_delta(logp.detach(), base, mask, reduce=self.reduce)

    def metrics(self, inputs: dict, delta: torch.Tensor, group_size: int) -> Metrics:
        """The frozen reference's delta diagnostics, logged here when the loss takes delta
        (the stages' diagnostics log them otherwise); means over micro-batches."""
        if self.reference == "sampling":
            return {}
        return delta_metrics(
            inputs["rewards"],
            delta,
            group_size,
            threshold=self.threshold,
            rcc_coef=self.coef,
            rcc_bound=self.bound,
        )


@dataclass
class SamplingCorrection:
    """vLLM's importance-sampling correction and the off-policy sequence mask in the
    project's loss, as TRL's ``_compute_loss`` applies them (:mod:`contrastive_rlvr.algorithms.
    sampling_correction`): the weight on each token's policy loss is TRL's own
    ``importance_sampling_ratio`` (computed at scoring time by TRL, in its four modes and
    clip bounds, and logged there as ``sampling/importance_sampling_ratio/*``) times the
    off-policy mask of ``sampling_per_token_logps`` (else pi_old) against the loss forward's
    log-probs; the KL term is not weighted.

    Under BiCC the sampler read the plain prompt and the loss the conditioned one. TRL's
    ratio already compares like with like (``pi_old(o | q)`` against the sampler, both on
    the plain prompt, at scoring time) and weights the conditioned loss. The mask compares
    :func:`mask_sampling_logps` instead of the sampling log-probs: the sampler's gap on the
    plain prompt carried onto the loss's prompt, so the context's own shift is not
    counted as off-policyness.

    Attributes:
        importance_sampling: ``use_vllm`` and ``vllm_importance_sampling_correction``.
        mask_threshold: ``off_policy_mask_threshold`` (None: no mask).
    """

    importance_sampling: bool
    mask_threshold: float | None

    @classmethod
    def from_config(cls, cfg) -> SamplingCorrection | None:
        on = bool(cfg.use_vllm and cfg.vllm_importance_sampling_correction)
        threshold = cfg.off_policy_mask_threshold
        return cls(on, threshold) if on or threshold is not None else None

    def weights(
        self,
        logp: torch.Tensor,
        inputs: dict,
        old: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        plain: bool = False,
    ) -> torch.Tensor | None:
        """(B, T) or (B, 1) weights >= 0 on the policy term, or None (all 1). ``plain``: the
        plain-prompt share of BiCC's mix (its forward reads the prompt the sampler read)."""
        weights = None
        if self.mask_threshold is not None:
            sampling = None if plain else mask_sampling_logps(inputs, logp)
            if sampling is None:
                sampling = inputs.get("sampling_per_token_logps", old)
            weights = off_policy_mask(
                advantages, logp, sampling, mask, threshold=self.mask_threshold
            )
        if self.importance_sampling:
            ratio = inputs.get("importance_sampling_ratio")
            if ratio is None:
                raise ValueError(
                    "vllm_importance_sampling_correction=True but the batch has no "
                    "importance_sampling_ratio (TRL sets it when generating with vLLM): "
                    "set use_vllm=True or the correction False"
                )
            weights = ratio if weights is None else weights * ratio
        return weights


def mask_sampling_logps(inputs: dict, logp: torch.Tensor) -> torch.Tensor | None:
    """Under BiCC (the stage wrote ``bicc_mask_sampling_shift``), the log-probs (B, T) the
    off-policy mask compares a forward on the loss's prompt with: pi_old on that prompt
    (``bicc_mask_old_per_token_logps``, off policy; else the detached ``logp``, on policy)
    plus the sampler's gap on the plain prompt (``sampling - pi_old(o | q)``). Then
    ``sampling' - logp`` is the sampler's gap plus the policy's drift since sampling, each
    measured on one prompt. None without BiCC's keys (the sampling log-probs stand)."""
    shift = inputs.get("bicc_mask_sampling_shift")
    if shift is None:
        return None
    old = inputs.get("bicc_mask_old_per_token_logps")
    return (logp.detach() if old is None else old) + shift


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
    ) -> None:
        self.name, self.recipe, self.accepted = name, recipe, loss_option_names(name)
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


def without_tool_tokens(inputs: dict) -> dict:
    """The micro-batch with TRL's ``tool_mask`` (B, T; 0 on tool-response tokens) folded
    into the objective's ``completion_mask``: those tokens are context, not the policy's
    output, so they get no gradient (as in TRL's loss). The forward keeps the full mask."""
    if "tool_mask" not in inputs:
        return inputs
    mask = inputs["completion_mask"]
    return {
        **inputs,
        "completion_mask": mask * inputs["tool_mask"],
        "forward_completion_mask": mask,
    }


class Loss:
    """The policy log-prob pass then the objective. ``entropy``: the objective reads the
    pass's per-token entropies (ReCo's entropy factor) as ``policy_entropy``."""

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
    TRL settings are in the config, :mod:`.trl_settings`). With BiCC (``bicc_mix`` 1) the
    policy reads the conditioned prompt: TRL's loss takes ``prompt_ids`` / ``prompt_mask``
    from the inputs, so they are BiCC's; old / reference log-probs are the stages' (the
    ratio mode's). TRL logs its own metrics; only RCC's loss-time delta diagnostics are
    returned here.

    RCC at loss time (:class:`LossTimeRCC`, the frozen reference): TRL's loss reads
    ``inputs["advantages"]`` after its policy forward, so the forward's log-probs are handed
    to ``on_logps``, which sets the RCC advantages of the micro-batch before TRL reads them.
    """

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

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:
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
            if mask:
                inputs["sampling_per_token_logps"] = mask_sampling_logps(inputs, logp)
            if rcc:
                delta = self.rcc.delta(logp, inputs, None)
                inputs["advantages"] = rcc_advantages_of(
                    self.recipe, self.rcc, inputs, delta, ctx, self.eps
                )
                metrics.update(self.rcc.metrics(inputs, delta, ctx.group_size))

        hook = on_logps if rcc or mask else None
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

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:
        plain_logp, plain_inputs = self.policy_pass(self.plain_logps, model, inputs, ctx)
        delta = self.rcc_delta(model, inputs, ctx, plain_logp)
        extra = {} if delta is None else {"delta": delta}
        plain, _ = self.objective(plain_logp, plain_inputs, ctx, plain=True, **extra)
        logp, objective_inputs = self.policy_pass(self.logps, model, inputs, ctx)
        loss, metrics = self.objective(logp, objective_inputs, ctx, **extra)
        return self.mix * loss + (1.0 - self.mix) * plain, metrics


def build_loss(cfg, recipe: Recipe, model: Any = None) -> Loss | TRLLoss:
    """The loss of a run, from its config (an :class:`~.config.RLVRConfig`): TRL's for
    the recipes TRL has (:func:`~.trl_settings.uses_trl_loss`), else the project's.
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
    # BiCC's conditioned_old ratio mode: the policy reads the plain prompt.
    conditioned = cfg.bicc and cfg.bicc_ratio_mode != "conditioned_old"
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
    if cfg.bicc and cfg.bicc_mix < 1.0:
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
    extra = None
    if cfg.reco:
        extra = reco_options(cfg.reco_factor_norm, cfg.reco_factor, vocab_size)
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
    )
