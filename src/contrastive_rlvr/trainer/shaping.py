"""Reward shaping and batch refills of DAPO (arXiv:2503.14476) on TRL's scored batches."""

from __future__ import annotations

from typing import Any

import torch
from trl.rewards import get_soft_overlong_punishment

# Per-row 2-D entries of TRL's scored batch that are left-padded; the others are right-padded.
LEFT_PADDED = ("prompt_ids", "prompt_mask", "bicc_prompt_ids", "bicc_prompt_mask")


def with_overlong_penalty(reward_funcs: Any, args: Any) -> list:
    """The reward functions, plus DAPO's soft overlong punishment (Eq. 13) last when the
    config asks for it (``reward_weights``, if set, must then have one entry more).

    The punishment is TRL's own reward function (``trl.rewards``), logged under its name
    ``soft_overlong_punishment_reward``: 0 up to ``max_len - cache_len`` tokens, then
    falling linearly to -1 at ``max_len``, the formula of
    :func:`contrastive_rlvr.algorithms.overlong_penalty`."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if args.overlong_punishment:
        if args.reward_weights is not None and len(args.reward_weights) != len(funcs) + 1:
            raise ValueError(
                f"reward_weights={args.reward_weights} must have {len(funcs) + 1} entries: one "
                "per reward function plus one for the overlong punishment, which comes last"
            )
        funcs.append(
            get_soft_overlong_punishment(args.max_completion_length, args.overlong_cache_len)
        )
    return funcs


def _pad_cat(pieces: list[torch.Tensor], left: bool, value: float | int) -> torch.Tensor:
    width = max(p.size(1) for p in pieces)
    padded = []
    for p in pieces:
        pad = p.new_full((p.size(0), width - p.size(1)), value)
        padded.append(torch.cat([pad, p] if left else [p, pad], dim=1))
    return torch.cat(padded, dim=0)


def take_rows(
    parts: list[tuple[dict[str, Any], torch.Tensor]], pad_token_id: int
) -> dict[str, Any]:
    """A scored batch made of chosen rows of several scored batches (same keys).

    ``parts`` holds ``(batch, row_indices)`` pairs; per-row tensors (first dim B)
    are indexed and concatenated, 2-D ones re-padded on their side (prompts on
    the left, completions and log-probs on the right). ``num_items_in_batch`` is
    left to the caller (it counts tokens over all processes).
    """
    first = parts[0][0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        num_rows = first["completion_ids"].size(0)
        if not (isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == num_rows):
            out[key] = value
            continue
        pieces = [batch[key][idx.to(batch[key].device)] for batch, idx in parts]
        if value.dim() == 1:
            out[key] = torch.cat(pieces)
        else:
            is_ids = key.endswith("_ids")
            fill = pad_token_id if is_ids else 0
            out[key] = _pad_cat(pieces, left=key in LEFT_PADDED, value=fill)
    return out


def add_unguided_keys(batch: dict[str, Any], like: dict[str, Any]) -> None:
    """Give a batch of unguided rows the OC-GRPO entries ``like`` has (zero sampling
    log-probs, guided flag off), so that the two merge row by row."""
    mask = batch["completion_mask"]
    if "oc_sampling_logps" in like and "oc_sampling_logps" not in batch:
        dtype = like["oc_sampling_logps"].dtype
        batch["oc_sampling_logps"] = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    if "oc_guided" in like and "oc_guided" not in batch:
        batch["oc_guided"] = torch.zeros(mask.size(0), dtype=torch.bool, device=mask.device)
