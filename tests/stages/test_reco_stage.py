"""ReCo's occurrence-weight stage on a hand-made batch."""

from __future__ import annotations

import math

import pytest
import torch
from stage_utils import context, make_batch

from contrastive_rlvr.trainer.stages import OccurrenceWeights


def test_weights_and_the_batch_normalisers():
    # One group of 4: [5, 6] three times, [7] once.
    batch = make_batch([[1]] * 4, [[5, 6], [5, 6], [7], [5, 6]], [1, 1, 0, 1])
    # pi_old = 1/2 on every real token (p(1 - p) = 1/4); 50 in the padding cell of row 2
    # (exp(50) would swamp the mean if padding were counted).
    old = torch.full((4, 2), math.log(0.5))
    old[2, 1] = 50.0
    batch.shared["old_logps"] = old
    ctx, _ = context(4)
    OccurrenceWeights(identity="tokens", factor_norm="mean")(batch, ctx)
    out = batch.data
    assert out["reco_weights"].tolist() == pytest.approx([1 / 3, 1 / 3, 1.0, 1 / 3])
    assert out["reco_weight_sum"].item() == pytest.approx(2.0)  # 3 * 1/3 + 1
    assert out["reco_weighted_tokens"].item() == pytest.approx(3.0)  # 3 * (1/3 * 2) + 1 * 1
    assert out["reco_variance_mean"].item() == pytest.approx(0.25)


def test_answer_identity_and_max_norm():
    # "3=7" and "so 7" state the answer 7; "x" states none (its own key).
    texts = ["3=7", "so 7", "x", "x"]
    batch = make_batch([[1]] * 4, [[ord(ch) for ch in t] for t in texts], [1, 1, 0, 0])
    ctx, _ = context(4)
    OccurrenceWeights(identity="answer", factor_norm="max")(batch, ctx)
    assert batch.data["reco_weights"].tolist() == pytest.approx([0.5, 0.5, 0.5, 0.5])
    assert "reco_variance_mean" not in batch.data


def expected_batch():
    # One group of 4 (G = 4); pi_old per token, the sequence probability pi_old(o | q):
    # row 0: 0.5 * 0.5 = 0.25 -> G pi = 1   -> weight 1
    # row 1: 0.5 * 1   = 0.5  -> G pi = 2   -> weight 1/2
    # row 2: 1 * 1     = 1    -> G pi = 4   -> weight 1/4
    # row 3: 0.1 (one token; 50 in its padding cell must not count) -> 0.4 -> weight 1
    batch = make_batch([[1]] * 4, [[5, 6], [5, 7], [8, 9], [3]], [1, 1, 0, 1])
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 1.0], [1.0, 1.0], [0.1, 1.0]]))
    old[3, 1] = 50.0
    return batch, old


def test_expected_weights_by_hand_from_the_plain_old_logps():
    batch, old = expected_batch()
    batch.shared["old_logps"] = old
    ctx, _ = context(4)
    OccurrenceWeights(identity="tokens", factor_norm="max", weights="expected")(batch, ctx)
    out = batch.data
    assert out["reco_weights"].tolist() == pytest.approx([1.0, 0.5, 0.25, 1.0])
    assert out["reco_weight_sum"].item() == pytest.approx(2.75)
    # Weighted tokens: 1 * 2 + 0.5 * 2 + 0.25 * 2 + 1 * 1 = 4.5.
    assert out["reco_weighted_tokens"].item() == pytest.approx(4.5)
    assert "reco_variance_mean" not in out


def test_expected_weights_on_local_rows_with_trls_old_logps_and_sums_over_processes():
    # Process 1 of 2 holds these 4 rows (half of a group of G = 8 split over processes).
    # No log-prob stage ran: TRL's old_per_token_logps are pi_old, no forward is needed.
    batch, old = expected_batch()
    batch.data["old_per_token_logps"] = old

    def no_forward(*args, **kwargs):
        raise AssertionError("pi_old was in the batch; no forward should run")

    # The other process's sums, as if its rows were weighted the same.
    ctx, _ = context(
        8,
        process_index=1,
        num_processes=2,
        gather=lambda t: torch.cat([t, t]),
        policy_logps=no_forward,
    )
    OccurrenceWeights(identity="tokens", factor_norm="mean", weights="expected")(batch, ctx)
    out = batch.data
    # G = 8: G pi = 2, 4, 8, 0.8 -> weights 1/2, 1/4, 1/8, 1 (each row's own pi_old).
    assert out["reco_weights"].tolist() == pytest.approx([0.5, 0.25, 0.125, 1.0])
    assert out["reco_weight_sum"].item() == pytest.approx(2 * 1.875)
    # 0.5 * 2 + 0.25 * 2 + 0.125 * 2 + 1 * 1 = 2.75 per process.
    assert out["reco_weighted_tokens"].item() == pytest.approx(2 * 2.75)
    # p(1 - p) over the 7 real tokens: 0.25 x 3 (p = 0.5), 0 x 3 (p = 1), 0.09 (p = 0.1).
    assert out["reco_variance_mean"].item() == pytest.approx((0.75 + 0.09) / 7)


def test_count_weights_stay_the_default():
    batch, old = expected_batch()
    batch.shared["old_logps"] = old
    ctx, _ = context(4)
    OccurrenceWeights(identity="tokens", factor_norm="max")(batch, ctx)
    assert batch.data["reco_weights"].tolist() == [1.0, 1.0, 1.0, 1.0]  # all distinct
    with pytest.raises(ValueError, match="unknown ReCo weights 'seen'"):
        OccurrenceWeights(identity="tokens", factor_norm="max", weights="seen")
