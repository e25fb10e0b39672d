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


@pytest.mark.parametrize(
    ("bound", "expected", "shift"),
    [
        # R = [1, 0, 0, 0], delta = [0, 0, 0, 5]: mean R = 0.25, mean delta = 1.25,
        # Cov = (0.75 * -1.25 + 2 * (-0.25 * -1.25) + -0.25 * 3.75) / 4 = -0.3125,
        # b* = 0.25 + 2 * -0.3125 = -0.375, outside [min R, max R] = [0, 1].
        # 'none': R - b* = [1.375, 0.375, 0.375, 0.375], the wrong rows pushed up;
        # GRPO divides by the Bessel std 0.5: [2.75, 0.75, 0.75, 0.75].
        ("none", [2.75, 0.75, 0.75, 0.75], 0.625),
        # 'reward_range': b* clamped to 0, R - 0 = [1, 0, 0, 0], / 0.5 = [2, 0, 0, 0].
        ("reward_range", [2.0, 0.0, 0.0, 0.0], 0.25),
    ],
)
def test_rcc_bound_from_the_config_through_the_built_pipeline(tmp_path, bound, expected, shift):
    from stage_utils import CharTokenizer

    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.stages import RunFacts, build_stages

    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", recipe="grpo", num_generations=4,
        rcc=True, rcc_bound=bound, beta=0.0, log_delta=False, adv_eps=0.0,
        max_completion_length=8,
    )  # fmt: skip
    pipeline = build_stages(cfg, RunFacts(CharTokenizer(), 4, has_reference=True))["train"]
    assert pipeline.names == ["rewards", "logprobs", "advantages", "diagnostics"]
    batch = make_batch([[1]] * 4, [[5, 6]] * 4, [1, 0, 0, 0])
    delta = torch.tensor([0.0, 0.0, 0.0, 5.0])

    def policy(prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
        return torch.full(completion_ids.shape, -1.0)

    def reference(prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
        # log pi_ref = log pi_old - delta on every token, so the token mean is delta.
        return policy(prompt_ids, prompt_mask, completion_ids, completion_mask) - delta[:, None]

    ctx, logged = context(4, policy_logps=policy, reference_logps=reference)
    pipeline(batch, ctx)
    torch.testing.assert_close(batch.shared["delta"], delta)
    torch.testing.assert_close(batch.data["advantages"], torch.tensor(expected))
    # The diagnostics use the same bound: |b* - mean R| = |-0.375 - 0.25| or |0 - 0.25|.
    assert logged["rcc/baseline_shift"] == pytest.approx([shift])


def test_rcc_bound_is_validated():
    from contrastive_rlvr.trainer.config_groups import RCCOptions

    with pytest.raises(ValueError, match="rcc_bound='clip' is invalid: choose one of none"):
        RCCOptions(rcc_bound="clip").validate_rcc()
    assert RCCOptions().rcc_bound == "reward_range"


def test_conspo_counts_the_usable_groups_of_the_whole_gathered_batch():
    # Process 0 of 2 holds group 0; the gathered rewards hold 3 groups of 2: [1, 0] usable,
    # [1, 1] not, [0, 1] usable -> 2, the loss's window-wide normaliser on every process.
    batch = make_batch([[1]] * 2, [[5]] * 2, [1, 0, 1, 1, 0, 1])
    ctx, _ = context(2, process_index=0, num_processes=3)
    Advantages(get_recipe("conspo"), rcc=False, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    assert batch.data["conspo_groups"].item() == 2.0
    # With RCC's b* = 0.7 on group 0 and 1.0 (the top of the range) on group 2, only group 0
    # keeps a positive above its cut: 1 usable group.
    batch.shared["delta"] = torch.tensor([0.4, 0.0, 0.0, 0.0, -9.0, 9.0])
    Advantages(get_recipe("conspo"), rcc=True, rcc_coef=2.0, eps=1e-6)(batch, ctx)
    assert batch.data["conspo_groups"].item() == 1.0


def test_the_default_eps_is_trls(tmp_path):
    from contrastive_rlvr.trainer import RLVRConfig

    cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none")
    assert cfg.adv_eps == 1e-4  # GRPOTrainer: (R - mean) / (std + 1e-4)
    batch = make_batch([[1]] * 2, [[5]] * 2, [1.0, 0.75])
    ctx, _ = context(2)
    Advantages(get_recipe("grpo"), rcc=False, rcc_coef=2.0, eps=cfg.adv_eps)(batch, ctx)
    # mean 0.875, Bessel std = 0.125 * sqrt(2) = 0.176777: A = 0.125 / (0.176777 + 1e-4)
    # = 0.706707 (with 1e-6: 0.707103).
    assert batch.data["advantages"].tolist() == pytest.approx([0.706707, -0.706707], abs=2e-6)
