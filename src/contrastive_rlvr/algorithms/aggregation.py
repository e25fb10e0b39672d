"""Token aggregation: how per-token loss terms become one scalar.

The three modes (names as verl's ``loss_agg_mode``):

- ``seq-mean-token-mean`` (GRPO paper): mean over each row's tokens, then mean over rows.
- ``token-mean`` (DAPO, arXiv:2503.14476 Sec. 3.3): sum of every token term / token count.
- ``seq-mean-token-sum-norm`` (Dr.GRPO, arXiv:2503.20783): each row's token sum divided
  by a constant ``max_len``, then mean over rows.

The normaliser is explicit so that gradient accumulation and data parallelism
can reproduce the full-batch value: pass ``num_rows`` / ``num_tokens`` of the
whole batch to every micro-batch and sum the micro-batch losses.
"""

from __future__ import annotations

from typing import Literal, get_args

from .ops import Tensor, check_same_shape, masked_mean, masked_sum

AggMode = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = get_args(AggMode)


def agg_loss(
    per_token: Tensor,
    mask: Tensor,
    mode: AggMode,
    *,
    max_len: int | None = None,
    num_rows: float | None = None,
    num_tokens: float | None = None,
) -> Tensor:
    """Aggregate per-token terms (B, T) into a scalar.

    Args:
        per_token: (B, T) loss terms; masked cells are ignored whatever they hold.
        mask: (B, T), 1 on completion tokens.
        mode: one of :data:`AGG_MODES`.
        max_len: the constant of ``seq-mean-token-sum-norm``; default T.
        num_rows: rows of the whole batch (default B) for the ``seq-mean`` modes.
        num_tokens: completion tokens of the whole batch (default ``mask.sum()``)
            for ``token-mean``.
    Returns:
        0-dim tensor.
    """
    check_same_shape(per_token=per_token, mask=mask)
    rows = per_token.shape[0] if num_rows is None else num_rows
    if mode == "seq-mean-token-mean":
        return masked_mean(per_token, mask, dim=1).sum() / rows
    if mode == "token-mean":
        tokens = mask.sum().clamp(min=1) if num_tokens is None else num_tokens
        return masked_sum(per_token, mask) / tokens
    if mode == "seq-mean-token-sum-norm":
        length = per_token.shape[1] if max_len is None else max_len
        if length <= 0:
            raise ValueError(f"max_len must be positive, got {length}")
        return masked_sum(per_token, mask, dim=1).sum() / (length * rows)
    raise ValueError(f"unknown aggregation mode {mode!r}; valid: {', '.join(AGG_MODES)}")
