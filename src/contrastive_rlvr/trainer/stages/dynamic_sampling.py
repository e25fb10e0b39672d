"""DAPO's dynamic sampling (arXiv:2503.14476, Sec. 3.2): groups whose rewards are all
equal carry no gradient, so they are replaced by newly sampled groups that do."""

from __future__ import annotations

import torch

from ...algorithms import informative_groups
from ..shaping import add_unguided_keys, take_rows
from .base import Batch, StageContext


class DynamicSampling:
    """Replaces all-equal groups by informative groups of fresh prompts, for at most
    ``max_rounds`` extra generation rounds. Every process generates in every round
    (the scoring gathers across processes); groups still collapsed after the cap stay
    (zero advantage). Logs ``dapo/extra_rounds``, ``dapo/groups_replaced`` and
    ``dapo/groups_still_collapsed``. ``prompts`` follows the rows: a replaced group's
    dataset rows are the fresh ones it was generated from."""

    name = "dynamic_sampling"
    reads = ("rewards", "data.completion_ids")
    writes = ("rewards", "prompts", "data.num_items_in_batch")

    def __init__(self, *, max_rounds: int) -> None:
        self.max_rounds = max_rounds

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        g, out = ctx.group_size, batch.data
        rows = ctx.rows(out["completion_ids"].size(0))
        local = batch.rewards[rows]
        collapsed = (~informative_groups(local, g)).nonzero().flatten().tolist()
        # (batch, row indices, rewards, the dataset rows it was generated from)
        found: list[tuple[dict, torch.Tensor, torch.Tensor, list[dict]]] = []
        rounds = 0
        while rounds < self.max_rounds:
            missing = torch.tensor(float(len(collapsed) - len(found)), device=local.device)
            if ctx.reduce(missing, "max").item() <= 0:
                break
            prompts = ctx.draw_prompts(len(local) // g)
            sources = [r for r in prompts for _ in range(g)]
            extra, extra_all = ctx.generate_and_score(sources)
            add_unguided_keys(extra, out)
            extra_local = extra_all[rows]
            for group in informative_groups(extra_local, g).nonzero().flatten().tolist():
                idx = torch.arange(group * g, (group + 1) * g)
                found.append((extra, idx, extra_local[idx], sources))
            rounds += 1
        replaced = min(len(collapsed), len(found))
        ctx.log("dapo/extra_rounds", rounds)
        ctx.log("dapo/groups_replaced", replaced)
        ctx.log("dapo/groups_still_collapsed", len(collapsed) - replaced)
        if replaced == 0:
            return batch
        swap = dict(zip(collapsed[:replaced], found[:replaced], strict=True))
        parts, new_local, new_prompts = [], [], []
        # The dataset rows follow their rows (BiCC's chat placement reads the messages).
        track = len(batch.prompts) == len(local)
        for group in range(len(local) // g):
            if group in swap:
                source, idx, rew, sources = swap[group]
                parts.append((source, idx))
                new_local.append(rew)
                new_prompts.extend(sources[i] for i in idx.tolist())
            else:
                idx = torch.arange(group * g, (group + 1) * g)
                parts.append((out, idx))
                new_local.append(local[idx])
                if track:
                    new_prompts.extend(batch.prompts[i] for i in idx.tolist())
        merged = take_rows(parts, ctx.tokenizer.pad_token_id)
        merged["num_items_in_batch"] = ctx.gather(merged["completion_mask"].sum().reshape(1)).sum()
        batch.data, batch.rewards = merged, ctx.gather(torch.cat(new_local))
        if track:
            batch.prompts = new_prompts
        return batch


class PromptWalk:
    """Fresh training rows for dynamic sampling: a seeded walk over the dataset (reshuffled
    with ``seed + 7919 * step`` when used up), a different offset per process so that
    processes draw different prompts."""

    def __init__(self, dataset, seed: int, process_index: int) -> None:
        self.dataset, self.seed, self.process_index = dataset, seed, process_index
        self._order: list[int] = []

    def draw(self, num_prompts: int, step: int) -> list[dict]:
        rows = []
        for _ in range(num_prompts):
            if not self._order:
                gen = torch.Generator().manual_seed(self.seed + 7919 * step)
                self._order = torch.randperm(len(self.dataset), generator=gen).tolist()
            index = self._order.pop()
            rows.append(self.dataset[(index + self.process_index) % len(self.dataset)])
        return rows
