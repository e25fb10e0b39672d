"""DAPO's batch extras in the trainer: dynamic sampling and the soft overlong punishment."""

from __future__ import annotations

import pytest
import torch
from trainer_utils import GROUP, make_config, make_trainer, save_tiny_model

from contrastive_rlvr.algorithms import collapse_rate
from contrastive_rlvr.trainer.shaping import take_rows, with_overlong_penalty


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def half_collapsed_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """Prompts starting with an even digit always score 1 (a collapsed group); the
    others score the parity of the token-id sum (a mixed group, almost surely)."""
    return [
        1.0 if int(p[0]) % 2 == 0 else float(sum(ids) % 2 == 0)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


def test_dynamic_sampling_replaces_collapsed_groups(model_dir, tmp_path):
    config = make_config(
        tmp_path,
        recipe="dapo",
        max_steps=1,
        per_device_train_batch_size=4 * GROUP,
        dynamic_sampling_max_rounds=3,
        overlong_punishment=False,
    )
    assert config.dynamic_sampling  # on by default for dapo
    trainer = make_trainer(model_dir, config, reward=half_collapsed_reward)
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    out = trainer._generate_and_score_completions(batch)
    rewards = out["rewards"]
    # The batch keeps its size, and its rewards are those of its own completions.
    assert rewards.shape == (4 * GROUP,)
    prompts = trainer.processing_class.batch_decode(
        [r[m.bool()] for r, m in zip(out["prompt_ids"], out["prompt_mask"], strict=True)],
        skip_special_tokens=True,
    )
    completions = [
        r[m.bool()].tolist()
        for r, m in zip(out["completion_ids"], out["completion_mask"], strict=True)
    ]
    assert rewards.tolist() == half_collapsed_reward(prompts, None, completions)
    for g in range(0, len(prompts), GROUP):  # groups stay whole
        assert len(set(prompts[g : g + GROUP])) == 1
    replaced = trainer._metrics["train"]["dapo/groups_replaced"][-1]
    before = collapse_rate(
        torch.tensor(
            half_collapsed_reward([row["prompt"] for row in batch], None, [[0]] * len(batch))
        ),
        GROUP,
    )
    assert replaced > 0 and before > 0
    assert collapse_rate(rewards, GROUP) < 1.0
    assert out["num_items_in_batch"] == out["completion_mask"].sum()
    trainer.train()  # and the merged batch trains
    assert trainer.nonfinite_losses == 0


def test_overlong_penalty_reward_and_wiring(model_dir, tmp_path):
    config = make_config(tmp_path, recipe="dapo", dynamic_sampling=False, max_completion_length=8)
    assert config.overlong_punishment and config.overlong_cache_len == 2
    penalty = with_overlong_penalty([], config)[-1]  # TRL's soft overlong punishment
    # max 8, cache 2: lengths 6 (<= 8-2: 0), 7 ((6-7)/2 = -0.5), 8 ((6-8)/2 = -1), 9 (-1)
    lengths = [[1] * 6, [1] * 7, [1] * 8, [1] * 9]
    assert penalty(completion_ids=lengths, prompts=None, completions=None) == [0, -0.5, -1, -1]
    trainer = make_trainer(model_dir, config)
    assert trainer.reward_func_names[-1] == "soft_overlong_punishment_reward"
    with pytest.raises(ValueError, match="reward_weights"):
        make_trainer(model_dir, make_config(tmp_path, recipe="dapo", reward_weights=[1.0]))


def test_take_rows_repads_each_side():
    a = {
        "prompt_ids": torch.tensor([[0, 5], [6, 7]]),
        "completion_ids": torch.tensor([[1, 0], [2, 3]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(3),
    }
    b = {
        "prompt_ids": torch.tensor([[8, 9, 9]]),
        "completion_ids": torch.tensor([[4, 4, 4]]),
        "advantages": torch.tensor([1.0]),
        "num_items_in_batch": torch.tensor(3),
    }
    merged = take_rows([(a, torch.tensor([1])), (b, torch.tensor([0]))], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[0, 6, 7], [8, 9, 9]]  # left padded
    assert merged["completion_ids"].tolist() == [[2, 3, 0], [4, 4, 4]]  # right padded
    assert merged["advantages"].tolist() == [-0.5, 1.0]
