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

For the recipes TRL has (:mod:`~contrastive_rlvr.trainer.trl_settings`), :class:`TRLLoss`
runs TRL's own ``GRPOTrainer._compute_loss`` on the inputs the stages prepared (advantages, old /
reference log-probs; BiCC's conditioned prompt ids in place of ``prompt_ids``), so TRL's
loss-side features (vLLM importance sampling, ``tool_mask``, entropy bonus, MoE router
loss, top-entropy mask, ``delta``) apply as in TRL. The project's loss honours
``tool_mask`` (tool-response tokens get no gradient), vLLM's importance-sampling
correction and the off-policy mask as TRL applies them (:class:`SamplingCorrection`) and,
in the trainer, the router loss; the config rejects TRL's other loss options with

The package: :mod:`.context` (the context and the log-prob pass), :mod:`.corrections`
(RCC at loss time, the sampling correction), :mod:`.objectives` (the policy and ConSPO
objectives), :mod:`.build` (the loss objects and :func:`build_loss`).
"""

from __future__ import annotations

from .build import Loss, MixedLoss, TRLLoss, _policy_objective, build_loss
from .context import LossContext, PolicyLogps, old_logps, without_tool_tokens
from .corrections import SamplingCorrection, rcc_advantages_of
from .objectives import ContrastiveObjective, PolicyObjective, reco_options
from .transfer import TransferProbe

__all__ = [
    "ContrastiveObjective",
    "Loss",
    "LossContext",
    "MixedLoss",
    "PolicyLogps",
    "PolicyObjective",
    "SamplingCorrection",
    "TRLLoss",
    "TransferProbe",
    "_policy_objective",
    "build_loss",
    "old_logps",
    "rcc_advantages_of",
    "reco_options",
    "without_tool_tokens",
]
