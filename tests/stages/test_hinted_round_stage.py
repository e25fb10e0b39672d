"""OC-GRPO's hinted-round stage with a stand-in for TRL's generate-and-score."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, left_pad, make_batch, right_pad

from contrastive_rlvr.trainer.stages import HintedRound

Q, R = [ord("q")], [ord("r")]  # the two prompts' token ids


def stage(merge: str = "replace") -> HintedRound:
    return HintedRound(
        column="solution", fraction=0.5, unit="chars", template="{hint}|{prompt}",
        threshold=0.5, merge=merge,
    )  # fmt: skip


def two_groups():
    """G = 2: group 0 ("q") all wrong, group 1 ("r") mixed."""
    batch = make_batch([Q, Q, R, R], [[5], [6], [7], [8]], [0, 0, 1, 0])
    batch.prompts = [{"prompt": "q", "solution": "abcd"}] * 2 + [{"prompt": "r"}] * 2
    return batch


def fake_generate(seen: list):
    def generate(rows):
        seen.extend(r["prompt"] for r in rows)
        ids, mask = left_pad([[ord(c) for c in r["prompt"]] for r in rows])
        completion_ids, completion_mask = right_pad([[9, 9], [4]])
        out = {"prompt_ids": ids, "prompt_mask": mask, "completion_ids": completion_ids,
               "completion_mask": completion_mask}  # fmt: skip
        return out, torch.tensor([1.0, 0.0])  # the guided group is rescued

    return generate


def test_rescued_group_replaces_the_all_fail_one_on_its_unguided_prompt():
    batch, seen = two_groups(), []
    ctx, logged = context(2, generate_and_score=fake_generate(seen))
    stage()(batch, ctx)
    # The hint: the first floor(0.5 * 4) = 2 characters of the solution.
    assert seen == ["ab|q", "ab|q"]
    out = batch.data
    assert out["oc_guided"].tolist() == [True, True, False, False]
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    # Guided rows on the unguided prompt "q", with the guided completions.
    pairs = zip(out["prompt_ids"], out["prompt_mask"], strict=True)
    assert [r[m.bool()].tolist() for r, m in pairs] == [Q, Q, R, R]
    assert out["completion_ids"][:2].tolist() == [[9, 9], [4, 0]]
    # log pi_old(o | q, hint) from the stand-in forward on "ab|q": -(97+98+124+113)/100.
    assert out["oc_sampling_logps"][0, 0].item() == pytest.approx(-4.32)
    assert out["oc_sampling_logps"][2:].abs().sum() == 0  # unguided rows: unused zeros
    assert out["num_items_in_batch"].item() == 2 + 1 + 1 + 1
    assert logged["oc/fail_groups"] == [1.0] and logged["oc/rescued_frac"] == [1.0]


def test_no_all_fail_group_no_round():
    batch = make_batch([Q, Q], [[5], [6]], [1, 0])

    def never(rows):
        raise AssertionError("no group failed: nothing to sample again")

    ctx, logged = context(2, generate_and_score=never)
    stage()(batch, ctx)
    assert "oc_guided" not in batch.data and logged["oc/fail_groups"] == [0.0]


def test_setup_checks_name_the_field():
    with pytest.raises(ValueError, match="oc_solution_column='solution'"):
        stage().check_setup(["prompt"], beta=0.0, has_reference=False, num_processes=1)
    with pytest.raises(ValueError, match="beta > 0"):
        stage().check_setup(None, beta=0.1, has_reference=False, num_processes=1)
    with pytest.raises(ValueError, match="oc_merge='append'"):
        stage("append").check_setup(None, beta=0.0, has_reference=False, num_processes=2)
