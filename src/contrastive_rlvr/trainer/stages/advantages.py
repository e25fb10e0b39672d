"""The recipe's advantages on the gathered rewards, RCC-corrected when RCC is on
(b* = mean(R) + c Cov(R, delta); docs/algorithms.md), sliced to this process's rows."""

from __future__ import annotations

import torch

from ...algorithms import DEFAULT_RCC_BOUND, Recipe, recipe_advantages, usable_groups
from .base import Batch, StageContext


class Advantages:
    """Policy recipes: ``data["advantages"]`` (B,) from the recipe's group statistics,
    and ``shared["outcome_advantages"]`` (B_global,) for a later stage (VeriGate).
    ConSPO: ``data["conspo_groups"]`` (0-dim), the generation batch's count of usable
    groups over all processes (the loss's window-wide normaliser), and with RCC
    ``data["conspo_baseline"]`` (B,), the per-row cut b*.

    Args:
        recipe: the recipe (its objective, std scaling).
        rcc: use ``shared["delta"]`` for the RCC baseline (the frozen reference's delta).
        rcc_coef: c. rcc_bound: ``"reward_range"`` (b* clamped to the group's
            [min R, max R]) or ``"none"`` (the paper's formula).
        eps: the std floor of the normalisation.
        threshold: ConSPO's reward cut where no b* is taken here.
    """

    name = "advantages"
    reads = ("rewards", "data.completion_ids", "shared.delta?")
    writes = (
        "data.advantages",
        "data.conspo_baseline",
        "data.conspo_groups",
        "shared.outcome_advantages",
    )

    def __init__(
        self,
        recipe: Recipe,
        *,
        rcc: bool,
        rcc_coef: float,
        eps: float,
        rcc_bound: str = DEFAULT_RCC_BOUND,
        threshold: float = 0.5,
    ) -> None:
        self.recipe, self.rcc, self.rcc_coef, self.eps = recipe, rcc, rcc_coef, eps
        self.threshold = threshold
        self.rcc_bound = rcc_bound
        if rcc:
            self.reads = (*self.reads[:-1], "shared.delta")

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        # No delta with RCC: the loss takes it from its own forward (``LogProbPasses``'s
        # ``defer_delta``) and replaces these plain advantages.
        delta = batch.shared.get("delta") if self.rcc else None
        if self.recipe.objective == "contrastive" and (delta is None or ctx.group_size == 1):
            # A fixed reward threshold (b* of a one-row group is its reward: no pair).
            batch.data["conspo_groups"] = self._usable(batch.rewards, None, ctx.group_size)
            if delta is None:
                return batch
        if ctx.group_size == 1:  # evaluation with num_generations_eval=1: no group, A = 0
            zeros = torch.zeros_like(batch.rewards)
            rows = ctx.rows(batch.data["completion_ids"].size(0))
            if self.recipe.objective == "contrastive":
                batch.data["conspo_baseline"] = batch.rewards[rows]
            else:
                batch.data["advantages"] = zeros[rows]
                batch.shared["outcome_advantages"] = zeros
            return batch
        values = recipe_advantages(
            self.recipe,
            batch.rewards,
            ctx.group_size,
            delta=delta,
            rcc_coef=self.rcc_coef,
            rcc_bound=self.rcc_bound,
            eps=self.eps,
        )
        rows = ctx.rows(batch.data["completion_ids"].size(0))
        if self.recipe.objective == "contrastive":
            batch.data["conspo_baseline"] = values[rows]
            batch.data["conspo_groups"] = self._usable(batch.rewards, values, ctx.group_size)
        else:
            batch.data["advantages"] = values[rows]
            batch.shared["outcome_advantages"] = values
        return batch

    def _usable(self, rewards: torch.Tensor, baseline, group_size: int) -> torch.Tensor:
        """The gathered batch's usable ConSPO groups (0 for one-row groups). RCC at loss
        time may move b* off-policy; this count (the stage's cut) stays the normaliser."""
        if group_size < 2:
            return torch.zeros((), device=rewards.device)
        return usable_groups(rewards, group_size, threshold=self.threshold, baseline=baseline)
