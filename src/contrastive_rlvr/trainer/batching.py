"""Batch plumbing that keeps prompt groups whole."""

from __future__ import annotations

from typing import Any

import torch


def group_permutation(
    num_rows: int, group_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A random row order (num_rows,) that moves whole groups: rows of a group stay
    consecutive and in their order, the groups are shuffled."""
    if num_rows % group_size != 0:
        raise ValueError(f"{num_rows} rows are not whole groups of {group_size}")
    groups = torch.randperm(num_rows // group_size, generator=generator)
    return (groups.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)


def reorder_rows(batch: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
    """Apply a row order to every per-row entry of a batch dict (tensors with B rows,
    lists of B items); scalars and other entries pass through unchanged."""
    num_rows = order.numel()
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == num_rows:
            out[key] = value[order.to(value.device)]
        elif isinstance(value, list) and len(value) == num_rows:
            out[key] = [value[i] for i in order.tolist()]
        else:
            out[key] = value
    return out


def split_rows(batch: dict[str, Any], num_chunks: int) -> list[dict[str, Any]]:
    """Split a batch dict into ``num_chunks`` consecutive chunks of rows."""
    num_rows = batch["completion_ids"].shape[0]
    if num_rows % num_chunks != 0:
        raise ValueError(f"{num_rows} rows cannot be split into {num_chunks} equal micro-batches")
    size = num_rows // num_chunks
    chunks = []
    for c in range(num_chunks):
        rows = slice(c * size, (c + 1) * size)
        chunk = {}
        for key, value in batch.items():
            is_rows = (
                isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == num_rows
            )
            if is_rows or (isinstance(value, list) and len(value) == num_rows):
                chunk[key] = value[rows]
            else:
                chunk[key] = value
        chunks.append(chunk)
    return chunks


def unpad(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Token id lists without padding, from (B, L) ids and their attention mask."""
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
