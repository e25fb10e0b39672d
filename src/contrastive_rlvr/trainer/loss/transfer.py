"""The transfer measure of every BiCC run, ``bicc/transfer_cos`` (docs/bicc.md, "Does
BiCC reach the policy that samples?"): does the update the run applies move the policy
that samples, ``pi_theta(. | q)``, the way plain GRPO would on the same batch?"""

from __future__ import annotations

import torch

from ...algorithms.bicc_transfer import (
    PATIENCE,
    TransferWatch,
    plain_grpo_surrogate,
    probe_due,
    transfer_cosine,
)
from .context import LossContext, without_tool_tokens

__all__ = ["ADVICE", "DISTILL_ADVICE", "PATIENCE", "TransferProbe"]

#: What the low-transfer warning tells a TRL run to do, by BiCC's form.
ADVICE = (
    "the conditioned share trains pi(.|[q;O]) in a direction unrelated to the reward on q; "
    "run --bicc_form distill (the conditioned model as a teacher for the plain prompt), "
    "lower --bicc_mix, or --bicc false"
)
DISTILL_ADVICE = (
    "the distillation term pulls the plain prompt away from the reward's direction (a "
    "teacher that does not read the attempts); lower --bicc_distill_weight, or --bicc false"
)


class TransferProbe:
    """Every ``every`` optimizer steps (and at the first), on that step's first
    micro-batch: the gradient of the loss the run applies (from its own graph, kept for
    the real backward) against the gradient of plain GRPO's on-policy surrogate on the
    plain prompt (:func:`~contrastive_rlvr.algorithms.bicc_transfer.plain_grpo_surrogate`,
    a new forward), same rows and advantages (the stages' advantages; an RCC correction
    taken at loss time is in the applied loss only). The cosine over every trainable
    parameter is :func:`~contrastive_rlvr.algorithms.bicc_transfer.transfer_cosine`.

    Cost on a probed step: one more backward through the applied loss's graph and one
    plain forward and backward on one micro-batch. Neither touches ``.grad``."""

    def __init__(self, every: int, threshold: float, *, distill: bool = False) -> None:
        self.every, self.threshold = every, threshold
        self._last_step: int | None = None
        self.watch = TransferWatch(threshold, DISTILL_ADVICE if distill else ADVICE)

    @property
    def values(self) -> list[float]:
        """Every probe's cosine, in order."""
        return self.watch.values

    @classmethod
    def from_config(cls, cfg) -> TransferProbe:
        """The run's probe: ``bicc_transfer_every`` with BiCC on, else never."""
        every = cfg.bicc_transfer_every if cfg.bicc else 0
        return cls(every, cfg.bicc_transfer_warn, distill=cfg.bicc_form == "distill")

    def due(self, step: int, loss: torch.Tensor | None = None) -> bool:
        """Whether optimizer step ``step`` is probed (once, on its first micro-batch; never
        on a non-finite ``loss``, which the trainer skips)."""
        if step == self._last_step:
            return False
        if loss is not None and not bool(torch.isfinite(loss)):
            return False
        return probe_due(step, self.every)

    def __call__(self, model, loss: torch.Tensor, inputs: dict, ctx: LossContext, step: int, log):
        """Measure on a probed step and log ``bicc/transfer_cos`` as ``log("train", key,
        value)``; nothing on other steps."""
        if self.due(step, loss):
            log("train", "bicc/transfer_cos", self.measure(model, loss, inputs, ctx, step))

    def measure(
        self, model: torch.nn.Module, loss: torch.Tensor, inputs: dict, ctx: LossContext, step: int
    ) -> float:
        """The cosine for this micro-batch (NaN when either gradient is 0)."""
        self._last_step = step
        params = [p for p in model.parameters() if p.requires_grad]
        applied = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        mask = without_tool_tokens(inputs)["completion_mask"]
        logp = ctx.logps(
            model,
            inputs["prompt_ids"],
            inputs["prompt_mask"],
            inputs["completion_ids"],
            inputs["completion_mask"],
        )
        surrogate = plain_grpo_surrogate(logp, mask, inputs["advantages"].reshape(-1))
        plain = torch.autograd.grad(surrogate, params, allow_unused=True)
        value = transfer_cosine(applied, plain)
        self._check(value)
        return value

    def _check(self, value: float) -> None:
        self.watch.record(value)

    @property
    def warned(self) -> bool:
        """Whether the run has warned (once) about low transfer."""
        return self.watch.warned
