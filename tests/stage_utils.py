"""Hand-made batches and a single-process context for the stage tests (no trainer)."""

from __future__ import annotations

from collections import defaultdict

import torch

from contrastive_rlvr.trainer.stages import Batch, StageContext


class CharTokenizer:
    """Token id t decodes to chr(t) (id 0 is the special pad/EOS token, decoded as '')."""

    pad_token_id = 0

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join("" if t == 0 else chr(t) for t in ids)

    def batch_decode(self, rows, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(r) for r in rows]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}


def left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def right_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask


def make_batch(prompts, completions, rewards, **data) -> Batch:
    """A scored batch as TRL leaves it: left-padded prompts, right-padded completions."""
    prompt_ids, prompt_mask = left_pad(prompts)
    completion_ids, completion_mask = right_pad(completions)
    out = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "num_items_in_batch": completion_mask.sum(),
        **data,
    }
    return Batch(data=out, rewards=torch.tensor(rewards, dtype=torch.float))


def marker_logps(prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
    """A stand-in forward: every token's log-prob is -(the sum of the row's prompt ids) / 100,
    so the test can tell which prompt a log-prob was taken on."""
    value = -(prompt_ids * prompt_mask).sum(1, keepdim=True).float() / 100
    return value.expand(-1, completion_ids.size(1)).clone()


def context(group_size: int, **overrides) -> tuple[StageContext, dict[str, list[float]]]:
    """A one-process context whose ``log`` records into the returned dict."""
    logged: dict[str, list[float]] = defaultdict(list)
    values = dict(
        group_size=group_size,
        gather=lambda t: t,
        gather_object=lambda xs: list(xs),
        log=lambda key, value: logged[key].append(float(value)),
        policy_logps=marker_logps,
        tokenizer=CharTokenizer(),
    )
    values.update(overrides)
    return StageContext(**values), logged
