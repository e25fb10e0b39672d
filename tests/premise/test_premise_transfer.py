"""``premise``'s transfer measure at the start weights (premise/transfer.py) on models whose
answer is known by construction: one that ignores the context (the conditioned form's
gradient is plain GRPO's: cosine 1; the teacher equals the student: no distill gradient)
and one that reads the context with weights of its own (the conditioned gradient misses
the plain prompt's weights: cosine 0)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from contrastive_rlvr.premise.transfer import start_transfer, token_logps
from tests.premise.test_premise import VOCAB, R, W, conditioning, groups


class Heads(torch.nn.Module):
    """Logits ``a`` at every position of a row without a BiCC header, ``b`` in a row
    with one (``shared``: ``a`` everywhere, the context ignored)."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Parameter(torch.randn(VOCAB))
        self.b = torch.nn.Parameter(torch.randn(VOCAB))
        self.shared = shared

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        n, length = input_ids.shape
        read = ((input_ids == W) | (input_ids == R)).any(1)
        heads = torch.stack([self.b if r and not self.shared else self.a for r in read.tolist()])
        return SimpleNamespace(logits=heads.unsqueeze(1).expand(n, length, VOCAB))


def _transfer(model: Heads) -> dict:
    return start_transfer(model, groups(), conditioning(), budget=lambda _: 100)


def test_a_model_that_ignores_the_context_transfers_fully():
    out = _transfer(Heads(shared=True))
    assert out["groups"] == 3
    assert out["conditioned"] == pytest.approx(1.0, abs=1e-6)
    assert math.isnan(out["distill"])  # teacher = student: the distill term has no gradient


def test_a_context_read_by_other_weights_does_not_transfer():
    out = _transfer(Heads(shared=False))
    assert out["conditioned"] == pytest.approx(0.0, abs=1e-7)
    assert math.isfinite(out["distill"])  # the teacher (b) differs: the student (a) moves


def test_token_logps_by_hand():
    # Logits a everywhere: each token's log-prob is log_softmax(a)[token]; padding masked.
    model = Heads(shared=True)
    logp, mask = token_logps(model, [[5], [6, 7]], [[8, 1], [9]])
    want = torch.log_softmax(model.a.detach(), -1)
    assert mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    torch.testing.assert_close(
        logp.detach(), torch.stack([want[[8, 1]], torch.stack([want[9], torch.tensor(0.0)])])
    )
