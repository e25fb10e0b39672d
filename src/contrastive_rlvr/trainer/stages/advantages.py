"""The recipe's advantages on the gathered rewards, RCC-corrected when RCC is on
(b* = mean(R) + c Cov(R, delta); ALGORITHMS.md), sliced to this process's rows."""

from __future__ import annotations

import torch

from ...algorithms import DEFAULT_RCC_BOUND, Recipe, recipe_advantages
from .base import Batch, StageContext


class Advantages:
    """Policy recipes: ``data["advantages"]`` (B,) from the recipe's group statistics,
    and ``shared["outcome_advantages"]`` (B_global,) for a later stage (VeriGate).
    ConSPO with RCC: ``data["conspo_baseline"]`` (B,), the per-row cut b*.

    Args:
        recipe: the recipe (its objective, std scaling).
        rcc: use ``shared["delta"]`` for the RCC baseline (the frozen reference's delta).
        rcc_coef: c. rcc_bound: ``"reward_range"`` (b* clamped to the group's
            [min R, max R]) or ``"none"`` (the paper's formula).
        eps: the std floor of the normalisation.
    """

    name = "advantages"
    reads = ("rewards", "data.completion_ids", "shared.delta?")
    writes = ("data.advantages", "data.conspo_baseline", "shared.outcome_advantages")

    def __init__(
        self,
        recipe: Recipe,
        *,
        rcc: bool,
        rcc_coef: float,
        eps: float,
        rcc_bound: str = DEFAULT_RCC_BOUND,
    ) -> None:
        self.recipe, self.rcc, self.rcc_coef, self.eps = recipe, rcc, rcc_coef, eps
        self.rcc_bound = rcc_bound
        if rcc:
            self.reads = (*self.reads[:-1], "shared.delta")

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        # No delta with RCC: the loss takes it from its own forward (``LogProbPasses``'s
        # ``defer_delta``) and replaces these plain advantages.
        delta = batch.shared.get("delta") if self.rcc else None
        if self.recipe.objective == "contrastive" and delta is None:
            return batch  # plain ConSPO: a fixed reward threshold, no advantages
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
        else:
            batch.data["advantages"] = values[rows]
            batch.shared["outcome_advantages"] = values
        return batch
