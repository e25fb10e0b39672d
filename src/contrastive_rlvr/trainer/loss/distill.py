"""BiCC's distill form at loss time (``bicc_form: distill``, docs/bicc.md): the recipe's
loss on the plain prompt, plus the sampled-token reverse KL towards the conditioned
teacher whose log-probs the stage wrote (:class:`~contrastive_rlvr.trainer.stages.
bicc_teacher.TeacherPrompts`), through the same plain forward."""

from __future__ import annotations

from dataclasses import replace

import torch

from ...algorithms.bicc_transfer import sampled_token_distill_loss
from .context import LossContext, Metrics, without_tool_tokens


class DistillLoss:
    """``(1 - weight) x base + weight x distill`` (TRL SDPO's convex form), where ``base``
    (a :class:`~.build.Loss` or :class:`~.build.TRLLoss`) is the recipe's loss on the
    plain prompt and ``distill`` the sampled-token reverse KL on the rows the stage
    marked ``bicc_taught``, divided by the micro-batches of the step as the base loss is.
    The student's log-probs are the base loss's own forward (no second forward): TRL's
    through its log-prob hook, the project's by recording the one gradient-carrying plain
    forward."""

    def __init__(
        self,
        base,
        *,
        weight: float,
        is_clip: float | None,
        max_gap: float | None,
        center: bool = False,
    ) -> None:
        self.base, self.weight, self.center = base, weight, center
        self.is_clip, self.max_gap = is_clip, max_gap
        self.name = base.name
        self.logps = base.logps  # the plain prompt's pass (diagnostics read it)
        self.reads = (*base.reads, "data.bicc_teacher_logps", "data.bicc_taught")

    def __call__(self, model, inputs: dict, ctx: LossContext) -> tuple[torch.Tensor, Metrics]:
        if "bicc_teacher_logps" not in inputs:
            raise RuntimeError(
                "bicc_form='distill': the micro-batch has no teacher log-probs "
                "(the teacher_prompts stage did not run)"
            )
        seen: list[torch.Tensor] = []
        if getattr(self.base, "takes_watch", False):  # TRL's loss: its forward's hook
            loss, metrics = self.base(model, inputs, ctx, watch=seen.append)
        else:
            loss, metrics = self.base(model, inputs, replace(ctx, logps=_recorded(ctx.logps, seen)))
        if not seen:
            if torch.is_grad_enabled():
                raise RuntimeError("bicc_form='distill': the base loss made no plain forward")
            # Evaluation (no gradient): TRL's log-prob hook does not fire there, so the
            # eval loss is the recipe's on the plain prompt.
            return loss, metrics
        mask = without_tool_tokens(inputs)["completion_mask"]
        distill, extra = sampled_token_distill_loss(
            seen[0],
            inputs["bicc_teacher_logps"],
            mask,
            inputs["bicc_taught"],
            old_logp=inputs.get("old_per_token_logps"),
            is_clip=self.is_clip,
            max_gap=self.max_gap,
            center=self.center,
        )
        total = (1.0 - self.weight) * loss + self.weight * distill / ctx.accum
        return total, {**metrics, **{f"bicc/{k}": v for k, v in extra.items()}}


def _recorded(logps, seen: list[torch.Tensor]):
    """``ctx.logps`` that keeps the first gradient-carrying plain-prompt result."""

    def call(model, *tensors, share_prefix: bool = False, **kwargs):
        out = logps(model, *tensors, share_prefix=share_prefix, **kwargs)
        if torch.is_grad_enabled() and not share_prefix and not seen:
            seen.append(out[0] if isinstance(out, tuple) else out)
        return out

    return call
