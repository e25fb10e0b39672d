"""DAPO's dynamic-sampling stage with a stand-in for TRL's generate-and-score."""

from __future__ import annotations

import torch
from datasets import Dataset
from stage_utils import context, make_batch

from contrastive_rlvr.trainer.stages import DynamicSampling, PromptWalk


def extra_batch(rewards: list[float]):
    """A scored batch of two groups of 2 with completions 30.. and the given rewards."""
    fresh = make_batch([[3]] * 4, [[30], [31], [32], [33]], rewards)
    return fresh.data, fresh.rewards


def test_collapsed_group_is_replaced_by_an_informative_one():
    # G = 2: group 0 all right (collapsed), group 1 mixed.
    batch = make_batch([[1], [1], [2], [2]], [[10], [11], [12], [13]], [1, 1, 1, 0])
    drawn = []
    ctx, logged = context(
        2,
        draw_prompts=lambda n: drawn.append(n) or [{"prompt": "x"}] * n,
        generate_and_score=lambda rows: extra_batch([0, 0, 0, 1]),
    )
    DynamicSampling(max_rounds=3)(batch, ctx)
    # The fresh batch's group 1 (rows 2, 3) is informative: it takes group 0's place.
    assert batch.data["completion_ids"][:, 0].tolist() == [32, 33, 12, 13]
    assert batch.rewards.tolist() == [0, 1, 1, 0]
    assert drawn == [2]  # one round, as many prompts as the batch has groups
    assert logged["dapo/extra_rounds"] == [1] and logged["dapo/groups_replaced"] == [1]
    assert batch.data["num_items_in_batch"].item() == 4


def test_round_cap_leaves_the_group_collapsed():
    batch = make_batch([[1], [1]], [[10], [11]], [0, 0])
    ctx, logged = context(
        2,
        draw_prompts=lambda n: [{"prompt": "x"}] * n,
        generate_and_score=lambda rows: (
            make_batch([[3]] * 2, [[5], [6]], [1, 1]).data,
            torch.tensor([1.0, 1.0]),
        ),  # fmt: skip
    )
    DynamicSampling(max_rounds=2)(batch, ctx)
    assert logged["dapo/extra_rounds"] == [2] and logged["dapo/groups_still_collapsed"] == [1]
    assert batch.rewards.tolist() == [0, 0]


def test_prompt_walk_is_seeded_and_offset_per_process():
    data = Dataset.from_dict({"prompt": [f"p{i}" for i in range(5)]})
    a = [r["prompt"] for r in PromptWalk(data, seed=3, process_index=0).draw(5, step=0)]
    b = [r["prompt"] for r in PromptWalk(data, seed=3, process_index=1).draw(5, step=0)]
    assert sorted(a) == [f"p{i}" for i in range(5)]  # a permutation: each row once
    # Process 1 draws the row after process 0's, wrapping around.
    assert b == [f"p{(int(p[1:]) + 1) % 5}" for p in a]
    again = [r["prompt"] for r in PromptWalk(data, seed=3, process_index=0).draw(5, step=0)]
    assert again == a


def test_the_dataset_rows_follow_the_replaced_group():
    # BiCC's chat placement reads each row's messages from batch.prompts after this stage.
    batch = make_batch([[1], [1], [2], [2]], [[10], [11], [12], [13]], [1, 1, 1, 0])
    batch.prompts = [{"prompt": "a"}] * 2 + [{"prompt": "b"}] * 2
    ctx, _ = context(
        2,
        draw_prompts=lambda n: [{"prompt": f"fresh{i}"} for i in range(n)],
        generate_and_score=lambda rows: extra_batch([0, 0, 0, 1]),
    )
    DynamicSampling(max_rounds=3)(batch, ctx)
    # Group 0 is replaced by the fresh batch's group 1, generated from "fresh1".
    assert [r["prompt"] for r in batch.prompts] == ["fresh1", "fresh1", "b", "b"]
