"""The rows' own rewards: this process's slice of the gathered total rewards."""

from __future__ import annotations

from .base import Batch, StageContext


class RowRewards:
    """``data["rewards"]`` (B,): the loss's per-row rewards (ConSPO's positives, RCC's
    sampling baseline), after any stage that sampled again has set the batch."""

    name = "rewards"
    reads = ("rewards", "data.completion_ids")
    writes = ("data.rewards",)

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        batch.data["rewards"] = batch.rewards[ctx.rows(batch.data["completion_ids"].size(0))]
        return batch
