"""Log-probs of completions whose prompts repeat, with each distinct prompt encoded once.

Under BiCC every row of one partition of a group has the same conditioned
prompt ``[q ; O_opposite]``, which is most of the sequence. Encoding each
distinct prompt once and reusing its key/value cache for the completions of
all its rows gives the same log-probs as one forward per row (the test checks
it) for about a third of the tokens at G = 8.

Pass 1 runs the distinct prompts, less their last token, with gradient and a
cache; the cache is gathered to one entry per row; pass 2 runs each row's last
prompt token and its completion on top of it. Gradients reach the shared
prompt encoding through the gather.

It is two forwards per backward and needs the key/value cache, so it cannot run
under gradient checkpointing (transformers drops the cache there) nor under
DDP / ZeRO / FSDP, whose wrappers expect one forward per backward; the packed
form (:mod:`.packed_prefix`) has neither limit. Kept as the benchmark's
``bicc_cache`` arm and for single-process runs without checkpointing.
"""

from __future__ import annotations

import torch


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the first row of each distinct (ids, mask) row (U,) and each row's
    distinct index (B,)."""
    keys = torch.cat([ids, mask.to(ids.dtype)], dim=1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), ids.size(0), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(ids.size(0), device=ids.device), "amin")
    return first, inverse


def shared_prefix_logps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """Per-token log-probs (B, C) of each completion after its prompt.

    ``model`` is a causal LM patched with TRL's fused LM head (``labels`` plus
    ``fused_lm_head=True`` return per-token log-probs, temperature applied).
    Prompts are left-padded (B, P), completions right-padded (B, C).
    """
    first, inverse = distinct_rows(prompt_ids, prompt_mask)
    head_ids, head_mask = prompt_ids[first, :-1], prompt_mask[first, :-1]
    cache = model(input_ids=head_ids, attention_mask=head_mask, use_cache=True).cache
    cache.reorder_cache(inverse)
    tail = torch.cat([prompt_ids[:, -1:], completion_ids], dim=1)  # (B, 1 + C)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P + C)
    labels = tail.masked_fill(torch.cat([prompt_mask[:, -1:], completion_mask], 1) == 0, -100)
    labels[:, 0] = -100  # the last prompt token is context: its prediction is pass 1's
    out = model(
        input_ids=tail,
        attention_mask=attention,
        cache=cache,
        labels=labels,
        fused_lm_head=True,
    )
    return out.log_probs[:, -completion_ids.size(1) :]
