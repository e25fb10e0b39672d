"""DAPO's batch and reward extras (arXiv:2503.14476, Sec. 3.2 and 3.4).

The DAPO loss itself (clip-higher, token-mean) is ``policy_loss("dapo", ...)``.
"""

from __future__ import annotations

import torch

from .ops import Tensor, group_view, num_groups


def informative_groups(rewards: Tensor, group_size: int) -> Tensor:
    """Dynamic sampling filter: which groups have rewards that are not all equal.

    DAPO drops groups whose accuracy is 0 or 1 (they give no gradient) and
    samples more until the batch is full.

    Args:
        rewards: (B,).
    Returns:
        (B/G,) bool, True for groups to keep.
    """
    num_groups(rewards.shape[0], group_size, min_size=2, what="informative_groups")
    r = group_view(rewards, group_size)
    return ~(r == r[:, :1]).all(dim=1)


def overlong_penalty(lengths: Tensor, *, max_len: int, cache_len: int) -> Tensor:
    """Soft overlong punishment added to the reward (DAPO Eq. 13).

    ``0`` if ``|o| <= L_max - L_cache``; ``(L_max - L_cache - |o|) / L_cache`` inside
    the buffer; ``-1`` beyond ``L_max``.

    Args:
        lengths: (B,) completion lengths in tokens.
        max_len: L_max, the longest allowed completion.
        cache_len: L_cache, the length of the soft buffer (0 < L_cache <= L_max).
    Returns:
        (B,) penalties in [-1, 0].
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}"
        )
    lengths = lengths.to(torch.float64 if lengths.dtype == torch.float64 else torch.float32)
    start = max_len - cache_len
    inside = (start - lengths) / cache_len
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), inside)
    return torch.where(lengths > max_len, torch.full_like(lengths, -1.0), penalty)
