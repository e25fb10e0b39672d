"""Groups skipped for a non-finite reward (``nonfinite_rewards="skip_group"``): no
advantage, no gradient, counted (docs/reliability.md, "Non-finite numbers").

The trainer's reward check (:func:`~contrastive_rlvr.trainer.reward_guards.check_rewards`,
right after TRL's scoring) sets every reward of such a group to 0 and keeps its rows.
:class:`SkipNonFiniteGroups` runs first: it masks those rows out of the loss
(``completion_mask`` 0, so no token of theirs enters any objective, and
``num_items_in_batch`` counts only the rows that train) and logs
``reward/skipped_groups``.

All-zero rewards would make a skipped group look like an all-fail group to OC-GRPO's
hinted round (which would sample it again with a hint) and like a collapsed group to
DAPO's dynamic sampling (which would replace it), although nothing is known about it.
So, when those stages follow, the skipped rows carry stand-in rewards while they run:
``threshold + 1 + j`` for the j-th row of a group, above the threshold (not all-fail)
and all different (not collapsed), so both leave the group where it is.
:class:`RestoreSkippedRewards`, right after them, puts the 0 back; the rows keep
their places through both stages (they only replace the groups they picked, or
append), so the mask still points at them. The recipe's advantages of an all-zero
group are then exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .base import Batch, StageContext

SkippedRows = Callable[[], torch.Tensor | None]


def _stand_in(num_rows: int, group_size: int, threshold: float) -> torch.Tensor:
    """(num_rows,) ``threshold + 1 + j`` for the j-th row of each group."""
    return threshold + 1.0 + (torch.arange(num_rows) % group_size).float()


class SkipNonFiniteGroups:
    """Masks the rows of skipped groups out of the loss and counts the groups.

    Args:
        skipped_rows: returns the (B_global,) bool mask of the batch's last scoring
            (True on every row of a skipped group), or None before any.
        hold_for_resampling: stages that sample again follow: give the skipped rows
            stand-in rewards above ``threshold`` until :class:`RestoreSkippedRewards`.
        threshold: the reward threshold of the run (OC-GRPO's "correct").

    Writes ``data.completion_mask`` (skipped rows all 0), ``data.advantages`` (0 on
    them), ``data.num_items_in_batch`` and ``shared.skipped_rows`` (B_global,).
    Logs ``reward/skipped_groups``: groups of this batch skipped (every process's).
    """

    name = "skip_nonfinite"
    reads = ("rewards", "data.completion_ids", "data.completion_mask")
    writes = (
        "data.completion_mask",
        "data.advantages",
        "data.num_items_in_batch",
        "shared.skipped_rows",
        "rewards",
    )

    def __init__(
        self, skipped_rows: SkippedRows, *, hold_for_resampling: bool, threshold: float
    ) -> None:
        self.skipped_rows, self.hold, self.threshold = skipped_rows, hold_for_resampling, threshold

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        g, out, num_rows = ctx.group_size, batch.data, batch.rewards.numel()
        skipped = self.skipped_rows()
        if skipped is None:
            skipped = torch.zeros(num_rows, dtype=torch.bool)
        skipped = skipped.to(batch.rewards.device)
        if skipped.numel() != num_rows:
            raise RuntimeError(
                f"the skipped-row mask has {skipped.numel()} rows for a batch of {num_rows}: "
                "it must come from this batch's scoring"
            )
        batch.shared["skipped_rows"] = skipped
        ctx.log("reward/skipped_groups", skipped.view(-1, g).any(dim=1).sum())
        if not skipped.any():  # the same on every process: the mask is gathered
            return batch
        mask = out["completion_mask"]
        local = skipped[ctx.rows(mask.size(0))].to(mask.device)
        out["completion_mask"] = mask * (~local).unsqueeze(1).to(mask.dtype)
        if isinstance(out.get("advantages"), torch.Tensor):
            adv = out["advantages"]
            out["advantages"] = adv.masked_fill(local.view(-1, *[1] * (adv.dim() - 1)), 0.0)
        out["num_items_in_batch"] = ctx.gather(out["completion_mask"].sum().reshape(1)).sum()
        if self.hold:
            stand_in = _stand_in(num_rows, g, self.threshold).to(batch.rewards)
            batch.rewards = torch.where(skipped, stand_in, batch.rewards)
        return batch


class RestoreSkippedRewards:
    """Sets the skipped rows' rewards back to 0 after the stages that sample again.

    Rows appended by OC-GRPO (``oc_merge="append"``, one process) come after the
    batch's own rows and are never skipped ones."""

    name = "restore_skipped"
    reads = ("rewards", "shared.skipped_rows")
    writes = ("rewards",)

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        skipped = batch.shared["skipped_rows"]
        if not skipped.any():
            return batch
        rows = torch.zeros(batch.rewards.numel(), dtype=torch.bool, device=batch.rewards.device)
        rows[: skipped.numel()] = skipped.to(rows.device)
        batch.rewards = batch.rewards.masked_fill(rows, 0.0)
        return batch
