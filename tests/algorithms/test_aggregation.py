"""Token aggregation (verl's loss_agg_mode) by hand, and micro-batch invariance with
the global normalisers."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import AGG_MODES, agg_loss, policy_loss

torch.set_num_threads(1)

# Row 0 has 3 completion tokens (1, 2, 3), row 1 has one (4); the masked cells
# hold values that would wreck any sum they leaked into.
TERMS = torch.tensor([[1.0, 2.0, 3.0, 1e9], [4.0, math.nan, math.inf, -math.inf]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


def close(actual: torch.Tensor, expected: float) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype))


def test_seq_mean_token_mean():
    # row means 6/3 = 2 and 4/1 = 4; mean over rows (2 + 4) / 2 = 3
    close(agg_loss(TERMS, MASK, "seq-mean-token-mean"), 3.0)
    # global number of rows 4 (this is one micro-batch of four rows): (2 + 4) / 4
    close(agg_loss(TERMS, MASK, "seq-mean-token-mean", num_rows=4), 1.5)


def test_token_mean():
    # (1 + 2 + 3 + 4) / 4 tokens = 2.5; with a global count of 8 tokens: 10 / 8
    close(agg_loss(TERMS, MASK, "token-mean"), 2.5)
    close(agg_loss(TERMS, MASK, "token-mean", num_tokens=8), 1.25)


def test_seq_mean_token_sum_norm():
    # row sums 6 and 4, divided by the mask width T = 4, mean over 2 rows: 10 / (4 * 2)
    close(agg_loss(TERMS, MASK, "seq-mean-token-sum-norm"), 1.25)
    # a constant max_len = 5: 10 / (5 * 2); with 4 rows globally: 10 / (5 * 4)
    close(agg_loss(TERMS, MASK, "seq-mean-token-sum-norm", max_len=5), 1.0)
    close(agg_loss(TERMS, MASK, "seq-mean-token-sum-norm", max_len=5, num_rows=4), 0.5)


def test_masked_cells_get_zero_gradient():
    for mode in AGG_MODES:
        terms = TERMS.clone().requires_grad_(True)
        agg_loss(terms, MASK, mode).backward()
        assert torch.isfinite(terms.grad).all()
        assert (terms.grad[MASK == 0] == 0).all()
    # token-mean: every token weighs 1 / 4
    terms = TERMS.clone().requires_grad_(True)
    agg_loss(terms, MASK, "token-mean").backward()
    torch.testing.assert_close(terms.grad, torch.tensor([[0.25] * 3 + [0.0], [0.25, 0, 0, 0]]))


def test_all_masked_batch_gives_zero_not_nan():
    for mode in AGG_MODES:
        out = agg_loss(TERMS, torch.zeros_like(MASK), mode)
        assert out.item() == 0.0


def test_bad_mode_and_length():
    with pytest.raises(ValueError, match="unknown aggregation mode 'mean'.*token-mean"):
        agg_loss(TERMS, MASK, "mean")
    with pytest.raises(ValueError, match="max_len must be positive"):
        agg_loss(TERMS, MASK, "seq-mean-token-sum-norm", max_len=0)
    with pytest.raises(ValueError, match="shapes disagree"):
        agg_loss(TERMS, MASK[:, :3], "token-mean")


def _random_batch(seed: int, rows: int = 6, width: int = 7):
    g = torch.Generator().manual_seed(seed)
    terms = torch.randn(rows, width, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 1, 4, 2, 6, 3])[:rows]
    mask = (torch.arange(width) < lengths.unsqueeze(1)).long()
    return terms, mask


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_normalisers_sum_to_the_full_batch(mode):
    terms, mask = _random_batch(0)
    full = agg_loss(terms, mask, mode, max_len=7)
    glob = dict(max_len=7, num_rows=terms.shape[0], num_tokens=mask.sum())
    parts = []
    for sl in (slice(0, 2), slice(2, 3), slice(3, 6)):
        t, m = terms[sl], mask[sl]
        width = int(m.sum(1).max())  # each micro-batch padded only to its own longest row
        parts.append(agg_loss(t[:, :width], m[:, :width], mode, **glob))
    torch.testing.assert_close(sum(parts), full)


def test_local_normalisers_break_invariance():
    # Why the global normalisers exist: per-micro-batch token-means, averaged,
    # weigh the tokens of short micro-batches more (2 + 6 tokens here vs 8 + 11).
    terms, mask = _random_batch(1)
    full = agg_loss(terms, mask, "token-mean")
    local = (agg_loss(terms[:2], mask[:2], "token-mean") + agg_loss(terms[2:], mask[2:],
                                                                      "token-mean")) / 2
    assert not torch.allclose(local, full)


@pytest.mark.parametrize("name", ["grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "gmpo"])
def test_policy_loss_micro_batch_invariance(name):
    g = torch.Generator().manual_seed(2)
    b, t = 6, 7
    logp = (torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3).requires_grad_(True)
    old = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    ref = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    _, mask = _random_batch(0)
    opts = dict(clip_low=0.2, clip_high=0.3, ref_logp=ref, beta=0.1, num_rows=b)
    if name in ("grpo", "dapo", "dr_grpo"):
        opts.update(max_len=t, num_tokens=mask.sum())
    full, _ = policy_loss(name, logp, old, adv, mask, **opts)
    (grad_full,) = torch.autograd.grad(full, logp)
    total = 0.0
    for sl in (slice(0, 2), slice(2, 6)):
        o = {**opts, "ref_logp": ref[sl]}
        part, _ = policy_loss(name, logp[sl], old[sl], adv[sl], mask[sl], **o)
        total = total + part
    (grad_parts,) = torch.autograd.grad(total, logp)
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(grad_parts, grad_full)
