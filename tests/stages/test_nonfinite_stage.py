"""Groups skipped for a non-finite reward: masked out of the loss, counted, and left alone
by the stages that sample again (OC-GRPO's hinted round, DAPO's dynamic sampling)."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, left_pad, make_batch, right_pad

from contrastive_rlvr.algorithms import get_recipe
from contrastive_rlvr.trainer.stages import (
    Advantages,
    DynamicSampling,
    HintedRound,
    Pipeline,
    RestoreSkippedRewards,
    RowRewards,
    SkipNonFiniteGroups,
)

Q, R = [ord("q")], [ord("r")]


def batch_with_skipped_group():
    """G = 2, two groups: group 0 ("q") mixed, group 1 ("r") skipped (rewards zeroed by the
    reward check). Completions of 2, 1, 3 and 2 tokens; TRL's advantages a loud 7."""
    batch = make_batch(
        [Q, Q, R, R], [[5, 5], [6], [7, 7, 7], [8, 8]], [1, 0, 0, 0],
        advantages=torch.full((4,), 7.0),
    )  # fmt: skip
    batch.prompts = [{"prompt": "q", "solution": "ab"}] * 2 + [
        {"prompt": "r", "solution": "cd"}
    ] * 2
    return batch


SKIPPED = torch.tensor([False, False, True, True])


def test_skipped_rows_get_no_tokens_no_advantage_and_are_counted():
    batch = batch_with_skipped_group()
    ctx, logged = context(2)
    SkipNonFiniteGroups(lambda: SKIPPED, hold_for_resampling=False, threshold=0.5)(batch, ctx)
    out = batch.data
    assert out["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert out["advantages"].tolist() == [7.0, 7.0, 0.0, 0.0]
    assert out["num_items_in_batch"].item() == 2 + 1  # the tokens of rows 0 and 1 only
    assert batch.rewards.tolist() == [1, 0, 0, 0]  # no stage that samples again follows
    assert logged["reward/skipped_groups"] == [1.0]
    assert batch.shared["skipped_rows"].tolist() == SKIPPED.tolist()


def test_nothing_skipped_changes_nothing():
    batch = batch_with_skipped_group()
    mask = batch.data["completion_mask"].clone()
    ctx, logged = context(2)
    SkipNonFiniteGroups(lambda: None, hold_for_resampling=True, threshold=0.5)(batch, ctx)
    assert torch.equal(batch.data["completion_mask"], mask)
    assert batch.rewards.tolist() == [1, 0, 0, 0] and logged["reward/skipped_groups"] == [0.0]


def test_a_mask_of_another_batch_is_refused():
    ctx, _ = context(2)
    stage = SkipNonFiniteGroups(lambda: SKIPPED[:2], hold_for_resampling=False, threshold=0.5)
    with pytest.raises(RuntimeError, match="2 rows for a batch of 4"):
        stage(batch_with_skipped_group(), ctx)


def _pipeline(resample) -> Pipeline:
    skip = SkipNonFiniteGroups(lambda: SKIPPED, hold_for_resampling=True, threshold=0.5)
    advantages = Advantages(get_recipe("dr_grpo"), rcc=False, rcc_coef=0.0, eps=1e-6)
    return Pipeline([skip, resample, RestoreSkippedRewards(), RowRewards(), advantages])


def test_the_hinted_round_does_not_take_a_skipped_group_for_an_all_fail_one():
    def generate(rows):
        raise AssertionError(f"a hinted round was sampled for {[r['prompt'] for r in rows]}")

    hinted = HintedRound(
        column="solution", fraction=0.5, unit="chars", template="{hint}|{prompt}",
        threshold=0.5, merge="replace",
    )  # fmt: skip
    batch = batch_with_skipped_group()
    ctx, logged = context(2, generate_and_score=generate)
    _pipeline(hinted)(batch, ctx)
    assert logged["oc/fail_groups"] == [0.0]  # all-zero rewards, but skipped: not all-fail
    assert batch.rewards.tolist() == [1, 0, 0, 0]  # the zeros are back after the round
    # Dr.GRPO: A = R - mean of the group: +-0.5 in group 0, exactly 0 in the skipped one.
    assert batch.data["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]
    assert batch.data["completion_mask"][2:].sum() == 0


def test_dynamic_sampling_keeps_a_skipped_group_and_replaces_a_collapsed_one():
    batch = batch_with_skipped_group()
    batch.rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])  # group 0 collapsed, group 1 skipped
    fresh = []

    def generate(rows):
        fresh.append(len(rows))
        ids, mask = left_pad([[ord("s")]] * len(rows))
        completion_ids, completion_mask = right_pad([[9], [4]] * (len(rows) // 2))
        out = {"prompt_ids": ids, "prompt_mask": mask, "completion_ids": completion_ids,
               "completion_mask": completion_mask}  # fmt: skip
        return out, torch.tensor([1.0, 0.0] * (len(rows) // 2))  # informative groups

    ctx, logged = context(2, generate_and_score=generate, draw_prompts=lambda n: [{}] * n)
    _pipeline(DynamicSampling(max_rounds=1))(batch, ctx)
    assert fresh == [4]  # one round
    # Only group 0 was replaced (by the first fresh group); the skipped group stayed.
    assert logged["dapo/groups_replaced"] == [1.0]
    assert logged["dapo/groups_still_collapsed"] == [0.0]
    assert batch.data["completion_ids"][:2, 0].tolist() == [9, 4]
    assert batch.data["completion_ids"][2:, 0].tolist() == [7, 8]
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert batch.data["completion_mask"][2:].sum() == 0
    assert batch.data["num_items_in_batch"].item() == 1 + 1  # the fresh rows' tokens
    assert batch.data["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0]
