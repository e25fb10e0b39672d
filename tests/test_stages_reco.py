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
