"""The corrections the project's loss applies to the stages' advantages: RCC's delta taken
at loss time from the loss forward (:class:`LossTimeRCC`, :func:`rcc_advantages_of`), and
vLLM's importance-sampling correction with the off-policy mask
(:class:`SamplingCorrection`, :func:`mask_sampling_logps`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...algorithms import (
    Recipe,
    off_policy_mask,
    recipe_advantages,
    sequence_delta,
)
from ...algorithms.diagnostics import delta_metrics
from .context import LossContext, Metrics


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

    #: The batch entries RCC at loss time reads.
    reads: ClassVar = ("data.rewards", "data.rcc_ref_per_token_logps?")
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

    #: The batch entries the correction reads (TRL's and BiCC's, each when present).
    reads: ClassVar = (
        "data.importance_sampling_ratio?", "data.sampling_per_token_logps?",
        "data.bicc_mask_sampling_shift?", "data.bicc_mask_old_per_token_logps?",
    )  # fmt: skip
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
