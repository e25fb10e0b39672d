"""VeriGate's process advantages (docs/token-methods.md): in groups whose verifier
rewards are all equal (no outcome signal), token-level advantages from process
(step) scores; elsewhere the recipe's outcome advantages."""

from __future__ import annotations

from typing import Any

from ...algorithms import ProcessScorer, gated_groups, verigate_advantages
from ..batching import unpad
from ..token_method_inputs import step_scores_and_index
from .base import Batch, StageContext


class ProcessAdvantages:
    """``data["advantages"]`` becomes (B, T): process advantages in gated groups, the
    outcome advantages (``shared["outcome_advantages"]``, e.g. RCC-corrected) elsewhere.

    Steps are scored on each process for its rows; the group normalisation runs on the
    batch gathered from all processes.

    Args:
        scorer: the process scorer (prompt, steps) -> one score per step.
        step_rule, step_pattern: how a completion is split into steps.
        scale_by_std: the recipe's std scaling. eps: its floor.
        process_norm: ``"steps"`` (the config's default: normalise the step scores over
            the group, then sum each step's and the later steps' values, DeepSeekMath) or
            ``"cumulated"`` (cumulate, then normalise).
    """

    name = "process_advantages"
    reads = ("rewards", "shared.outcome_advantages", "data.prompt_ids", "data.completion_ids")
    writes = ("data.advantages",)

    def __init__(
        self,
        scorer: ProcessScorer,
        *,
        step_rule: str,
        step_pattern: str | None,
        scale_by_std: bool,
        eps: float,
        process_norm: str,
    ) -> None:
        self.scorer, self.step_rule, self.step_pattern = scorer, step_rule, step_pattern
        self.scale_by_std, self.eps, self.process_norm = scale_by_std, eps, process_norm

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out: dict[str, Any] = batch.data
        g, mask = ctx.group_size, out["completion_mask"]
        rows = ctx.rows(mask.size(0))
        needed = gated_groups(batch.rewards, g).repeat_interleave(g)[rows].tolist()
        scores, index = step_scores_and_index(
            self.scorer,
            ctx.tokenizer,
            unpad(out["prompt_ids"], out["prompt_mask"]),
            unpad(out["completion_ids"], mask),
            needed,
            mask,
            rule=self.step_rule,
            pattern=self.step_pattern,
        )
        advantages, metrics = verigate_advantages(
            batch.rewards,
            g,
            ctx.gather_object(scores),
            ctx.gather(ctx.pad_across_processes(index, dim=1, pad_index=-1)),
            ctx.gather(ctx.pad_across_processes(mask, dim=1, pad_index=0)),
            outcome=batch.shared["outcome_advantages"],
            scale_by_std=self.scale_by_std,
            eps=self.eps,
            process_norm=self.process_norm,
        )
        for key, value in metrics.items():
            ctx.log(key, value)
        out["advantages"] = advantages[rows, : mask.size(1)]  # (B, T)
        return batch
