"""Shared masked and group helpers for the algorithm core.

Vocabulary used by every docstring in this package:
``B`` rows (completions), ``T`` completion tokens, ``G`` group size. Rows are
laid out group by group: rows ``g*G .. g*G+G-1`` share one prompt. ``mask`` is
1 on completion tokens and 0 on padding.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def num_groups(num_rows: int, group_size: int, *, min_size: int = 1, what: str = "") -> int:
    """Number of groups in ``num_rows`` rows; raises ``ValueError`` on a bad layout.

    ``min_size`` is the smallest group the caller can work with (2 where a
    group statistic such as a std, a covariance or a contrast is needed).
    """
    prefix = f"{what}: " if what else ""
    if group_size < min_size:
        raise ValueError(
            f"{prefix}group_size={group_size} is too small; need at least {min_size} "
            "completions per prompt"
        )
    if num_rows % group_size != 0:
        raise ValueError(
            f"{prefix}group_size={group_size} does not divide the number of rows ({num_rows}); "
            "rows must be whole groups laid out one after another"
        )
    return num_rows // group_size


def check_same_shape(**tensors: Tensor) -> None:
    """Raise ``ValueError`` naming the tensors whose shapes disagree."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        desc = ", ".join(f"{n}{list(s)}" for n, s in shapes.items())
        raise ValueError(f"shapes disagree: {desc}")


def check_rows(name: str, x: Tensor, num_rows: int) -> None:
    """Raise ``ValueError`` unless ``x`` is a vector of ``num_rows`` entries."""
    if x.dim() != 1 or x.shape[0] != num_rows:
        raise ValueError(f"{name} must have shape ({num_rows},), got {list(x.shape)}")


def masked_fill_zero(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` with masked-out cells set to 0, whatever they held (inf and NaN too).

    Multiplying by the mask would turn ``inf * 0`` into NaN; ``where`` does not,
    and its gradient to the masked cells is exactly 0.
    """
    return torch.where(mask.bool(), x, torch.zeros_like(x))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over cells where ``mask`` is 1."""
    x = masked_fill_zero(x, mask)
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over cells where ``mask`` is 1; an all-masked row gives 0, not NaN."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def group_view(x: Tensor, group_size: int) -> Tensor:
    """Reshape a per-row vector (B,) to (B/G, G)."""
    return x.view(-1, group_size)


def per_token(advantages: Tensor, mask: Tensor) -> Tensor:
    """Broadcast per-row advantages (B,) to per-token (B, T); (B, T) passes through."""
    if advantages.dim() == 1:
        if advantages.shape[0] != mask.shape[0]:
            raise ValueError(
                f"advantages has {advantages.shape[0]} rows but mask has {mask.shape[0]}"
            )
        return advantages.unsqueeze(1).expand_as(mask)
    check_same_shape(advantages=advantages, mask=mask)
    return advantages
