"""BiCC's distill form (``bicc_form: distill``, docs/bicc.md): the conditioned prompts are
built as for the paper's form, but they only feed a no-grad teacher forward; the loss
reads the plain prompt, so the gradient trains the policy that samples."""

from __future__ import annotations

from ...algorithms.bicc_transfer import taught_rows
from .base import Batch, StageContext
from .bicc import ConditionedPrompts


class TeacherPrompts(ConditionedPrompts):
    """Writes, besides the conditioned prompt ids, ``bicc_teacher_logps`` (B, T): the
    teacher's log-probs of each sampled token after the row's conditioned prompt, and
    ``bicc_taught`` (B,) bool: the rows the teacher teaches. The old and reference
    log-probs stay TRL's (plain prompt).

    Args (besides :class:`ConditionedPrompts`'):
        teacher: ``"sampling"``: the policy that sampled the batch (no-grad forward now,
            before any update of this batch); ``"reference"``: the frozen reference model.
        taught: ``"wrong"`` or ``"both"`` (:func:`~contrastive_rlvr.algorithms.
            bicc_transfer.taught_rows`).
    """

    name = "teacher_prompts"
    writes = (
        "data.bicc_prompt_ids",
        "data.bicc_prompt_mask",
        "data.bicc_teacher_logps",
        "data.bicc_taught",
    )

    def __init__(self, template, *, teacher: str, taught: str, **kwargs) -> None:
        super().__init__(template, ratio_mode="distill", **kwargs)
        self.teacher, self.taught = teacher, taught

    def _set_ratio_logps(self, batch: Batch, ctx: StageContext, conditioned_rows) -> None:
        out = batch.data
        tensors = (
            out["bicc_prompt_ids"],
            out["bicc_prompt_mask"],
            out["completion_ids"],
            out["completion_mask"],
        )
        forward = ctx.policy_logps if self.teacher == "sampling" else ctx.reference_logps
        if forward is None:
            raise RuntimeError("bicc_teacher='reference' needs a reference model")
        out["bicc_teacher_logps"] = forward(*tensors, share_prefix=True)
        rows = ctx.rows(out["completion_ids"].size(0))
        rewards = batch.rewards[rows].to(conditioned_rows.device)
        taught = taught_rows(rewards, conditioned_rows, self.threshold, self.taught)
        out["bicc_taught"] = taught.to(out["completion_ids"].device)
        ctx.log("bicc/taught_frac", taught.float().mean())
