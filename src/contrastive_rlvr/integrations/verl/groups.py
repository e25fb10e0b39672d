"""Group layout on verl's batches, without importing verl (pure torch).

The algorithm core wants rows laid out group by group (``G`` consecutive rows
share a prompt). verl's batches are not: rows carry a group id (``uid``, verl's
``index``) and its load balancer reorders rows across data-parallel ranks. The
functions here sort rows into groups and back, rewrite prompts for BiCC in
batch order, carry ConSPO's positive labels, margin and window normaliser through
verl's ``advantages`` field, and check that a ConSPO run keeps its groups whole.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from ...algorithms.bicc import Messages, RenderChat
from ...algorithms.bicc_rows import BiCCRowBuilder
from ...algorithms.ops import Tensor, masked_mean

# ConSPO's targets are exact small numbers (-scale and 1 + margin); this tolerance
# (relative for the scale) only absorbs float32 rounding of the advantage field on its
# way through verl.
TARGET_TOL = 1e-5


def group_rows(index: Sequence[Hashable]) -> list[list[int]]:
    """Rows of each group, groups in order of first appearance, rows in batch order.

    Args:
        index: B group ids (verl's ``uid``), any hashable values.
    """
    groups: dict[Hashable, list[int]] = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    return list(groups.values())


def size_classes(index: Sequence[Hashable]) -> list[tuple[Tensor, int]]:
    """Rows laid out group by group, one entry per group size present.

    The core's reshapes to (B/G, G) need one G, while a verl batch can mix
    sizes (the padding rows verl adds to make a batch divisible form a group
    of their own). Each entry is ``(order, G)``: ``x[order]`` holds the
    groups of size G one after another, in order of first appearance.
    """
    by_size: dict[int, list[int]] = {}
    for rows in group_rows(index):
        by_size.setdefault(len(rows), []).extend(rows)
    return [(torch.tensor(rows, dtype=torch.long), g) for g, rows in sorted(by_size.items())]


def grouped_apply(index: Sequence[Hashable], fn: Callable[..., Tensor], *per_row: Tensor) -> Tensor:
    """Run a core group function on a verl batch and return its result in batch order.

    ``fn(G, *grouped)`` gets the (B_G,) rows of all groups of size G, laid out
    group by group, and returns (B_G,) values. Rows of a group of one get 0: a
    lone completion has no group baseline (verl's ``grpo`` gives it ``R``).

    Args:
        index: B group ids. per_row: (B,) tensors (rewards, delta, ...).
    Returns:
        (B,).
    """
    out = torch.zeros_like(per_row[0])
    for order, g in size_classes(index):
        if g > 1:
            out[order] = fn(g, *(x[order] for x in per_row)).to(out.dtype)
    return out


def conspo_window_scale(positive: Tensor, index: Sequence[Hashable]) -> float:
    """Groups per usable group of a ConSPO window: ``n_groups / max(U, 1)``, ``U`` the
    groups of two or more rows with both a positive and a negative (those ConSPO's loss
    averages over, :func:`~contrastive_rlvr.algorithms.conspo.usable_groups`).

    The loss divides a mini-batch's sum over groups by its groups / this scale, which is
    the window's usable groups times the mini-batch's share of the window: the TRL path's
    normaliser (``conspo_groups`` x share), whatever the micro-batch split and rank count.

    Args:
        positive: (B,) bool labels. index: B group ids.
    Returns:
        a float >= 1 (1 when every group is usable).
    """
    rows = group_rows(index)
    usable = sum(
        1 for r in rows if len(r) > 1 and bool(positive[r].any()) and not bool(positive[r].all())
    )
    return len(rows) / max(usable, 1)


def encode_conspo_targets(positive: Tensor, margin: float, scale: float = 1.0) -> Tensor:
    """ConSPO's per-row targets as verl advantages: ``1 + margin`` on positives, ``-scale``
    on negatives.

    verl hands a policy loss only log-probs, ``advantages`` and a mask, so the
    estimator passes ConSPO's labels, the step's margin ``m_t`` (cosine
    curriculum, known on the driver) and the window's normaliser
    (:func:`conspo_window_scale`, groups per usable group of the whole batch, known
    only where the whole batch is) in the advantage field; the loss decodes them
    with :func:`decode_conspo_targets`. A usable group always has a negative, so
    every micro-batch whose loss is not 0 can read the scale.

    Args:
        positive: (B,) bool. margin: m_t >= 0. scale: >= 1.
    Returns:
        (B,) float.
    """
    if margin < 0:
        raise ValueError(f"ConSPO margin must be >= 0, got {margin}")
    if scale < 1:
        raise ValueError(f"ConSPO window scale must be >= 1 (groups / usable groups), got {scale}")
    return torch.where(positive, 1.0 + margin, -float(scale)).to(torch.float32)


def decode_conspo_targets(advantages: Tensor, mask: Tensor) -> tuple[Tensor, float, float]:
    """Labels, margin and window scale back from token-level targets (B, T) (constant
    per row).

    Returns:
        ``positive`` (B,) bool, the margin (0 when the batch has no positive) and the
        window scale (1 when it has no negative: no usable group, the loss is 0).
    Raises:
        ValueError when positives disagree on m, negatives on the scale, or a negative
        is above -1: the advantages did not come from a ``crlvr_conspo*`` estimator.
    """
    per_row = masked_mean(advantages, mask, dim=1)  # (B,)
    positive = per_row > 0
    scales = -per_row[~positive]
    margins = per_row[positive] - 1.0
    if (
        bool((scales < 1.0 - TARGET_TOL).any())
        or (scales.numel() > 0 and float(scales.max() - scales.min()) > TARGET_TOL * scales.max())
        or bool((margins < -TARGET_TOL).any())
        or (margins.numel() > 0 and float(margins.max() - margins.min()) > TARGET_TOL)
    ):
        raise ValueError(
            "the crlvr_conspo loss needs the targets of a crlvr_conspo or crlvr_conspo_rcc "
            "advantage estimator (-scale or 1 + margin per row); set algorithm.adv_estimator"
        )
    margin = float(margins.mean().clamp(min=0.0)) if margins.numel() else 0.0
    scale = float(scales.mean().clamp(min=1.0)) if scales.numel() else 1.0
    return positive, margin, scale


@dataclass
class BiCCRows:
    """Conditioned prompts in batch order.

    Attributes:
        prompts: B 1-D token-id tensors ``[q ; O_opposite]`` (no padding).
        context_tokens: (B,) tokens added to each prompt (0 when not conditioned).
        budget: the context budget of this batch, in tokens.
    """

    prompts: list[Tensor]
    context_tokens: Tensor
    budget: int = 0


def bicc_rows(
    prompts: Sequence[Tensor],
    responses: Sequence[Tensor],
    rewards: Tensor,
    index: Sequence[Hashable],
    builder: BiCCRowBuilder,
    *,
    pad_token_id: int,
    max_positions: int | None = None,
    messages: Sequence[Messages] | None = None,
    render: RenderChat | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> BiCCRows:
    """BiCC's conditioned prompt of every row of a verl batch, in batch order.

    Sorts the rows into groups by ``index`` and builds them with
    :meth:`~contrastive_rlvr.algorithms.bicc_rows.BiCCRowBuilder.build`, the TRL
    stage's own code (budget, placement, chat rendering, truncation), with one
    budget for the whole batch (its longest prompt, as on TRL); the prompts go
    back in batch order without their left padding. Rows of a group of one
    (verl's padding rows) keep their prompt and do not count for the budget.

    Args:
        prompts, responses: B 1-D token-id tensors without padding.
        rewards: (B,). index: B group ids.
        messages: B chat prompts (verl's ``raw_prompt``), for the user-turn placement.
    """
    out: list[Tensor] = [prompts[r].clone() for r in range(len(prompts))]
    context_tokens = torch.zeros(len(prompts), dtype=torch.long)
    classes = [(order, g) for order, g in size_classes(index) if g >= 2]
    if not classes:
        return BiCCRows(prompts=out, context_tokens=context_tokens)
    longest = max(len(prompts[r]) for order, _ in classes for r in order.tolist())
    budget = builder.budget(longest, max_positions)
    for order, group_size in classes:
        rows = order.tolist()
        built, _ = builder.build(
            [prompts[r].tolist() for r in rows],
            [responses[r].tolist() for r in rows],
            rewards[order],
            group_size,
            budget=budget,
            max_positions=max_positions,  # with the framing outside, the whole context's cap
            longest_prompt=longest,
            pad_token_id=pad_token_id,
            messages=None if messages is None else [messages[r] for r in rows],
            render=render,
            decode=decode,
        )
        for k, row in enumerate(rows):
            out[row] = built.input_ids[k][built.attention_mask[k].bool()]
        context_tokens[order] = built.context_tokens
    return BiCCRows(prompts=out, context_tokens=context_tokens, budget=budget)


def whole_group_order(group_partitions: Sequence[Sequence[int]], rows: Sequence[Sequence[int]]):
    """Row order that puts the groups of partition 0 first, then partition 1, ...

    Args:
        group_partitions: for each data-parallel rank, the group numbers it gets.
        rows: rows of each group, from :func:`group_rows`.
    Returns:
        a list of B row numbers; each rank's contiguous share holds whole groups.
    """
    return [r for part in group_partitions for g in part for r in rows[g]]


def check_conspo_layout(
    *,
    group_size: int,
    shuffle: bool,
    use_dynamic_bsz: bool,
    micro_batch_size_per_gpu: int | None,
    mini_batch_size: int,
    dp_size: int | None = None,
) -> None:
    """Raise ``ValueError`` unless every ConSPO micro-batch holds whole groups.

    ConSPO contrasts each positive with the negatives of its own group inside
    one loss call, so verl must not cut a group: rows stay in order
    (``shuffle=False``), micro-batches are fixed-size chunks
    (``use_dynamic_bsz=False``) of whole groups (``micro_batch_size_per_gpu``
    a multiple of ``rollout.n``), and each data-parallel rank's share of a
    mini-batch (``ppo_mini_batch_size`` prompts) is whole groups.

    Args:
        group_size: ``actor_rollout_ref.rollout.n``.
        mini_batch_size: ``actor_rollout_ref.actor.ppo_mini_batch_size`` (prompts).
        dp_size: data-parallel ranks of the actor, when known.
    """
    prefix = "actor_rollout_ref.actor"
    if shuffle:
        raise ValueError(f"ConSPO needs {prefix}.shuffle=False (shuffling splits groups)")
    if use_dynamic_bsz:
        raise ValueError(
            f"ConSPO needs {prefix}.use_dynamic_bsz=False (token-packed micro-batches split groups)"
        )
    if micro_batch_size_per_gpu is None or micro_batch_size_per_gpu % group_size != 0:
        raise ValueError(
            f"ConSPO needs {prefix}.ppo_micro_batch_size_per_gpu to be a multiple of "
            f"actor_rollout_ref.rollout.n={group_size}, got {micro_batch_size_per_gpu}"
        )
    if dp_size is not None and mini_batch_size % dp_size != 0:
        raise ValueError(
            f"ConSPO needs {prefix}.ppo_mini_batch_size ({mini_batch_size} prompts) to be a "
            f"multiple of the actor's data-parallel size ({dp_size}), so that each rank gets "
            "whole groups"
        )
