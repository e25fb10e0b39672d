"""The diagnostics stage: accuracy, collapse rate, Cov(R, delta) and the batch stats."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, make_batch

from contrastive_rlvr.trainer.stages import BatchDiagnostics


def test_metrics_by_hand():
    # G = 2: group 1 mixed [1, 0], group 2 all right [1, 1].
    batch = make_batch([[1]] * 4, [[5]] * 4, [1, 0, 1, 1], advantages=torch.tensor([1.0, -1, 0, 0]))
    batch.shared["delta"] = torch.tensor([0.2, -0.2, 0.1, 0.3])
    ctx, logged = context(2)
    BatchDiagnostics(threshold=0.5, rcc_coef=2.0)(batch, ctx)
    assert logged["reward/accuracy"] == [0.75]
    assert logged["adv/collapse_rate"] == [0.5]
    # Cov per group (population): group 1 ((0.5)(0.2) + (-0.5)(-0.2)) / 2 = 0.1; group 2: 0.
    assert logged["rcc/cov"] == pytest.approx([0.05])
    assert logged["rcc/delta_mean"] == pytest.approx([0.1])
    assert logged["rcc/delta_correct"] == pytest.approx([0.2])  # mean(0.2, 0.1, 0.3)
    assert logged["rcc/delta_wrong"] == pytest.approx([-0.2])
    # |b* - mean| = 2 * Cov: 0.2 on group 1's rows, 0 on group 2's: mean 0.1.
    assert logged["rcc/baseline_shift"] == pytest.approx([0.1])
    stats = batch.shared["stats"]
    assert stats["rewards"].tolist() == [1, 0, 1, 1]
    assert stats["advantages"].tolist() == [1.0, -1, 0, 0]


def test_without_delta_or_rcc():
    batch = make_batch([[1]] * 2, [[5]] * 2, [0, 0])
    ctx, logged = context(2)
    BatchDiagnostics(threshold=0.5, rcc_coef=None)(batch, ctx)
    assert logged["reward/accuracy"] == [0.0] and logged["adv/collapse_rate"] == [1.0]
    assert not any(key.startswith("rcc/") for key in logged)
    assert "delta" not in batch.shared["stats"]
