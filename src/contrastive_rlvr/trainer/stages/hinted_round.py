"""OC-GRPO's hinted round: all-fail groups sampled again with a hint (docs/token-methods.md).

Each process samples its own all-fail groups again with a prefix of the reference
solution in the prompt, through TRL's generation and scoring; scoring gathers
across processes, so every process generates as many groups as the process with
the most (the surplus is dropped). Rescued groups enter the batch on their
unguided prompt, keeping log pi_old(o | q, hint) of the guided sampling as
``oc_sampling_logps`` for the loss's importance weight.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...algorithms import all_fail_groups, oc_merge
from ..shaping import add_unguided_keys, take_rows
from ..token_method_inputs import guided_rows
from .base import Batch, StageContext


class HintedRound:
    """Adds or swaps in guided groups for the all-fail ones, per ``merge``.

    Args:
        column, fraction, unit, template: where the reference solution is and how
            much of it, in which unit, goes into which prompt template as the hint.
        threshold: reward above which a completion is correct.
        merge: ``"replace"`` (a rescued group takes its all-fail group's place) or
            ``"append"`` (single process only).
    """

    name = "hinted_round"
    reads = ("rewards", "prompts", "data.prompt_ids", "data.completion_ids")
    writes = (
        "data.oc_guided",
        "data.oc_sampling_logps",
        "data.num_items_in_batch",
        "rewards",
    )

    def __init__(
        self, *, column: str, fraction: float, unit: str, template: str, threshold: float, merge
    ) -> None:
        self.column, self.fraction, self.unit, self.template = column, fraction, unit, template
        self.threshold, self.merge = threshold, merge

    def check_setup(
        self, columns: Sequence[str] | None, *, beta: float, has_reference: bool, num_processes: int
    ) -> None:
        """What OC-GRPO needs before the first step: reference solutions in the dataset,
        a reference model for KL on the unguided prompt, one process for 'append'."""
        if columns is not None and self.column not in columns:
            raise ValueError(
                f"oc_solution_column={self.column!r}: the train dataset has no such "
                f"column (columns: {columns}); OC-GRPO cuts its hints from reference solutions"
            )
        if beta > 0 and not has_reference:
            raise ValueError(
                "oc_grpo=True with beta > 0 needs a separate reference model (not a PEFT "
                "adapter) to score guided completions on the unguided prompt; set beta=0"
            )
        if self.merge == "append" and num_processes > 1:
            raise ValueError(
                "oc_merge='append' gives processes different batch sizes; with several "
                "processes use oc_merge='replace'"
            )

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        g, out = ctx.group_size, batch.data
        local = batch.rewards[ctx.rows(out["completion_ids"].size(0))]
        fail = all_fail_groups(local, g, threshold=self.threshold)
        failed = fail.nonzero().flatten().tolist()
        count = torch.tensor(float(len(failed)), device=local.device)
        most = int(ctx.reduce(count, "max").item())
        if most == 0:
            self._log_counts(ctx, len(fail), 0, 0, local.device)
            return batch
        picks = (failed * most)[:most] if failed else [0] * most
        source = [batch.prompts[group * g + j] for group in picks for j in range(g)]
        hinted = guided_rows(
            source,
            column=self.column,
            fraction=self.fraction,
            unit=self.unit,
            template=self.template,
        )
        guided, guided_all = ctx.generate_and_score(hinted)
        keep = torch.arange(len(failed) * g)
        guided_rewards = guided_all[ctx.rows(most * g)][keep]
        pad = ctx.tokenizer.pad_token_id
        guided = self._as_unguided(take_rows([(guided, keep)], pad), out, failed, ctx)
        plan = oc_merge(local, guided_rewards, g, threshold=self.threshold, mode=self.merge)
        out.pop("ref_per_token_logps", None)  # recomputed on the merged batch
        add_unguided_keys(out, guided)
        both = take_rows([(out, torch.arange(len(local))), (guided, keep)], pad)
        merged = take_rows([(both, plan.rows)], pad)
        merged["oc_guided"] = plan.guided.to(local.device)
        merged["num_items_in_batch"] = ctx.gather(merged["completion_mask"].sum().reshape(1)).sum()
        self._log_counts(ctx, len(fail), len(failed), int(plan.rescued.sum()), local.device)
        ctx.log("oc/guided_rows_frac", plan.metrics["oc/guided_rows_frac"])
        batch.data, batch.rewards = merged, ctx.gather(plan.rewards.to(local.device))
        return batch

    @staticmethod
    def _as_unguided(guided: dict, out: dict, failed: list[int], ctx: StageContext) -> dict:
        """Guided rows as trained: on the unguided prompt of the group they came from, with
        the guided sampling log-probs log pi_old(o | q, hint) kept as ``oc_sampling_logps``
        (``old_per_token_logps``, when TRL keeps it, becomes log pi_old(o | q))."""
        g = ctx.group_size
        source = torch.tensor([grp * g + j for grp in failed for j in range(g)], dtype=torch.long)
        completion = (guided["completion_ids"], guided["completion_mask"])
        sampling = guided.get("old_per_token_logps")
        if sampling is None:
            sampling = ctx.policy_logps(guided["prompt_ids"], guided["prompt_mask"], *completion)
        guided["oc_sampling_logps"] = sampling
        guided["prompt_ids"] = out["prompt_ids"][source.to(out["prompt_ids"].device)]
        guided["prompt_mask"] = out["prompt_mask"][source.to(out["prompt_mask"].device)]
        if "old_per_token_logps" in guided:
            guided["old_per_token_logps"] = ctx.policy_logps(
                guided["prompt_ids"], guided["prompt_mask"], *completion
            )
        guided.pop("ref_per_token_logps", None)
        return guided

    @staticmethod
    def _log_counts(ctx: StageContext, groups: int, failed: int, rescued: int, device) -> None:
        """All-fail and rescued groups summed over processes; ``oc/rescued_frac`` only on
        steps with an all-fail group (so its mean over steps is not diluted by zeros)."""
        counts = torch.tensor([groups, failed, rescued], dtype=torch.float, device=device)
        total_groups, total_failed, total_rescued = ctx.reduce(counts, "sum").tolist()
        ctx.log("oc/fail_groups", total_failed)
        ctx.log("oc/rescued_groups", total_rescued)
        ctx.log("oc/fail_frac", total_failed / max(total_groups, 1))
        if total_failed > 0:
            ctx.log("oc/rescued_frac", total_rescued / total_failed)
