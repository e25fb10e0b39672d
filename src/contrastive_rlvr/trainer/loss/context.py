"""What every loss of the trainer shares: the per-micro-batch context (:class:`LossContext`),
the policy log-prob pass on the plain or the conditioned prompt (:class:`PolicyLogps`),
pi_old's log-probs (:func:`old_logps`) and TRL's ``tool_mask`` folded into the objective's
completion mask (:func:`without_tool_tokens`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Metrics = dict[str, torch.Tensor]
#: What every loss reads when the batch has it: TRL's tool mask, OC-GRPO's guided rows.
OPTIONAL_READS = ("data.tool_mask?", "data.oc_guided?", "data.oc_sampling_logps?")


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
            are conditioned; the trainer's log-prob hook calls ``on_logps(logps)`` with
            its policy forward's log-probs (B, T) before TRL reads the advantages.
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
        #: The batch entries the pass reads, named as the stages' ``reads``.
        self.reads = tuple(f"data.{k}" for k in (*self.keys, "completion_ids", "completion_mask"))

    def __call__(
        self, model: torch.nn.Module, inputs: dict, ctx: LossContext, *, entropy: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, T) log-probs; with ``entropy``, and the forward's per-token entropies (B, T)."""
        ids, mask = inputs[self.keys[0]], inputs[self.keys[1]]
        tensors = (ids, mask, inputs["completion_ids"], inputs["completion_mask"])
        if entropy:
            return ctx.logps(model, *tensors, share_prefix=self.conditioned, entropy=True)
        return ctx.logps(model, *tensors, share_prefix=self.conditioned)


def old_logps(logp: torch.Tensor, inputs: dict, key: str = "old_per_token_logps") -> torch.Tensor:
    """log pi_old (B, T): the batch's, or the detached current log-probs on-policy; OC-GRPO's
    guided rows take their sampling log-probs log pi_old(o | q, hint)."""
    old = inputs.get(key)
    old = logp.detach() if old is None else old
    if "oc_guided" in inputs:
        old = torch.where(inputs["oc_guided"].unsqueeze(1), inputs["oc_sampling_logps"], old)
    return old


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
