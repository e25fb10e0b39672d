"""The packed layout's data and the helpers both the packed forward and its GPU kernels
read: :class:`PackedLayout` (the packed inputs of a batch), :class:`SplitLayout` (its
index for split attention), :class:`PackedPrefixUnsupported` (the signal to fall back to
the per-row forward) and :func:`_unwrap` (the transformers model under its wrappers).

:mod:`.packed_prefix` builds a layout and :mod:`.packed_kernels` runs attention over it;
both import this module, and neither imports the other's back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class PackedPrefixUnsupported(RuntimeError):
    """The model's attention cannot take the packed layout's mask; use the per-row forward."""


@dataclass
class SplitLayout:
    """Where each part of a packed row is, for split attention (prompt self-attention, then
    each row's segment attending to its prompt and itself).

    Attributes:
        shared: S, the longest shared prompt part; packed row u holds its own in columns
            ``0 .. S_u - 1`` (columns ``S_u .. S - 1`` belong to its first segments).
        row: (B,) the packed row of each row's segment.
        columns: (B, N) packed columns of each segment's tokens (N the longest segment).
        present: (B, N) bool, the columns that are the segment's (not padding).
        mask: (B, 1, N, S + N) bool, what segment token j may attend: its prompt's
            shared keys, then its own earlier (real) keys; padding sees itself.
    """

    shared: int
    row: torch.Tensor
    columns: torch.Tensor
    present: torch.Tensor
    mask: torch.Tensor


@dataclass
class PackedLayout:
    """The packed inputs of a batch and how to read the per-row log-probs back.

    Attributes:
        input_ids: (U, L) one packed row per distinct prompt.
        position_ids: (U, L) each token's position in its own row's sequence.
        segment: (U, L) -1 on the shared prompt part, b on row b's segment, -2 on padding.
        key_ok: (U, L) bool, tokens others may attend (real prompt and scored-or-inner
            completion tokens; a 0 of ``completion_mask`` is a key nobody sees).
        shift_labels: (U, L) the token each position predicts, -100 where nothing is scored.
        index: (B, C) flat index into (U * L) of the position that predicts
            completion token j of row b (0 where ``valid`` is False).
        valid: (B, C) bool, the completion positions that were packed.
        split: the same layout indexed for split attention (:class:`SplitLayout`).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment: torch.Tensor
    key_ok: torch.Tensor
    shift_labels: torch.Tensor
    index: torch.Tensor
    valid: torch.Tensor
    split: SplitLayout

    @property
    def allowed(self) -> torch.Tensor:
        """(U, L, L) bool, ``allowed[u, q, k]``: query q may attend key k (the dense mask)."""
        seg, length = self.segment, self.segment.size(1)
        device = seg.device
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        same = (seg.unsqueeze(2) == seg.unsqueeze(1)) | (seg == -1).unsqueeze(1)  # (U, Lq, Lk)
        is_pad = (seg == -2).unsqueeze(2)  # (U, Lq, 1)
        allowed = same & causal & self.key_ok.unsqueeze(1) & ~is_pad
        # Tail padding attends to itself only, so no query row is empty (NaN in SDPA).
        return allowed | (is_pad & torch.eye(length, dtype=torch.bool, device=device))

    @property
    def tokens(self) -> int:
        """Packed length U * L (with the tail padding of the shorter packed rows)."""
        return self.input_ids.numel()


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under DDP / accelerate / DeepSpeed wrappers (``.module``) and
    a PEFT wrapper (``get_base_model()``; TRL patches the head before PEFT wraps it)."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
            model = model.module
        elif hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
            model = model.get_base_model()
        else:
            return model
