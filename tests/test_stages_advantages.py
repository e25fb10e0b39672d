"""The rewards and advantages stages on hand-made batches (no trainer)."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, make_batch

from contrastive_rlvr.algorithms import get_recipe
from contrastive_rlvr.trainer.stages import Advantages, RowRewards

PROMPTS = [[1, 2]] * 4
COMPLETIONS = [[5], [6], [7], [8]]


def test_row_rewards_slice_this_process():
    # Process 1 of 2, 4 local rows: its rewards are rows 4..7 of the gathered 8.
    batch = make_batch(PROMPTS, COMPLETIONS, [0, 0, 0, 0, 1, 0, 1, 1])
    ctx, _ = context(4, process_index=1, num_processes=2)
    RowRewards()(batch, ctx)
    assert batch.data["rewards"].tolist() == [1, 0, 1, 1]


def test_dr_grpo_advantages_and_the_rcc_shift():
    # Two groups of 2 (G = 2); the local rows are the whole batch.
    batch = make_batch([[1]] * 4, [[5]] * 4, [1, 0, 1, 1])
    ctx, _ = context(2)
    Advantages(get_recipe("dr_grpo"), rcc=False, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    # Dr.GRPO: R - mean. Group 1: mean 0.5 -> +0.5, -0.5; group 2 all equal -> 0, 0.
    assert batch.data["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]
    assert batch.shared["outcome_advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]

    batch.shared["delta"] = torch.tensor([0.3, 0.1, 5.0, -5.0])
    Advantages(get_recipe("dr_grpo"), rcc=True, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    # Group 1: Cov(R, delta) = mean((R - 0.5)(delta - 0.2)) = (0.5*0.1 + -0.5*-0.1)/2 = 0.05,
    # b* = 0.5 + 2 * 0.05 = 0.6: advantages 1 - 0.6 = 0.4 and 0 - 0.6 = -0.6.
    # Group 2: equal rewards stay at 0 whatever delta says.
    torch.testing.assert_close(batch.data["advantages"], torch.tensor([0.4, -0.6, 0.0, 0.0]))


def test_grpo_scales_by_the_bessel_std_of_this_process_rows():
    # Process 0 of 2 holds the first group; the gathered rewards hold both.
    batch = make_batch([[1]] * 2, [[5]] * 2, [1, 0, 0, 0])
    ctx, _ = context(2, process_index=0, num_processes=2)
    Advantages(get_recipe("grpo"), rcc=False, rcc_coef=2.0, eps=0.0)(batch, ctx)
    # (1 - 0.5) / std([1, 0]) with std = sqrt(0.5) (Bessel): 0.5 / 0.7071 = 0.7071.
    expected = 0.5 / 0.5**0.5
    assert batch.data["advantages"].tolist() == pytest.approx([expected, -expected])


def test_conspo_gets_a_baseline_only_with_rcc():
    batch = make_batch([[1]] * 2, [[5]] * 2, [1, 0], advantages=torch.tensor([9.0, 9.0]))
    ctx, _ = context(2)
    Advantages(get_recipe("conspo"), rcc=False, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    assert "conspo_baseline" not in batch.data
    assert batch.data["advantages"].tolist() == [9.0, 9.0]  # TRL's, untouched
    batch.shared["delta"] = torch.tensor([0.4, 0.0])
    Advantages(get_recipe("conspo"), rcc=True, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    # b* = 0.5 + 2 * mean((0.5)(0.2), (-0.5)(-0.2)) = 0.5 + 2 * 0.1 = 0.7 on both rows.
    torch.testing.assert_close(batch.data["conspo_baseline"], torch.tensor([0.7, 0.7]))
