"""The log-prob passes stage: only what TRL left unset is computed, delta per row."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, make_batch

from contrastive_rlvr.trainer.stages import LogProbPasses


def reference_logps(prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
    return torch.full(completion_ids.shape, -1.0)


def test_old_reference_and_delta():
    # Completions of 2 and 1 tokens; the padding cell of row 1 holds a loud value.
    batch = make_batch([[10], [30]], [[5, 6], [7]], [1, 0])
    ctx, _ = context(2, reference_logps=reference_logps)
    LogProbPasses(old=False, reference=True, keep_reference=True, delta_reduce="mean")(batch, ctx)
    # old: the stand-in forward gives -(prompt id sum)/100: -0.1 and -0.3 on every token.
    old = batch.shared["old_logps"]
    assert old[:, 0].tolist() == pytest.approx([-0.1, -0.3])
    # delta = mean over real tokens of old - ref = -0.1 + 1 and -0.3 + 1.
    assert batch.shared["delta"].tolist() == pytest.approx([0.9, 0.7])
    assert batch.data["ref_per_token_logps"].eq(-1.0).all()


def test_trl_values_are_kept_and_sum_reduce():
    old = torch.tensor([[-0.5, -0.5], [-2.0, 99.0]])  # 99: padding, must not count
    ref = torch.tensor([[-1.0, -1.0], [-1.0, -50.0]])
    batch = make_batch(
        [[10], [30]], [[5, 6], [7]], [1, 0], old_per_token_logps=old, ref_per_token_logps=ref
    )

    def no_forward(*args, **kwargs):
        raise AssertionError("TRL's log-probs are there: no forward is needed")

    ctx, _ = context(2, policy_logps=no_forward, reference_logps=no_forward)
    LogProbPasses(old=True, reference=True, keep_reference=False, delta_reduce="sum")(batch, ctx)
    assert batch.shared["old_logps"] is old
    # sum over real tokens: (-0.5 + 1) * 2 = 1.0; (-2 + 1) = -1.0.
    assert batch.shared["delta"].tolist() == pytest.approx([1.0, -1.0])


def test_old_only_for_bicc_without_reference():
    batch = make_batch([[10], [30]], [[5], [7]], [1, 0])
    ctx, _ = context(2)
    LogProbPasses(old=True, reference=False, keep_reference=False, delta_reduce="mean")(batch, ctx)
    assert batch.shared["old_logps"][:, 0].tolist() == pytest.approx([-0.1, -0.3])
    assert "delta" not in batch.shared and "ref_per_token_logps" not in batch.data
