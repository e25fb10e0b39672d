"""ConSPO (arXiv:2605.12969): the loss by hand, its gradient against the closed form of
Lemma 2, dropped groups, the margin curriculum, gradcheck and bad input.

Notation: s_i = mean_t logp of row i (its length-normalised log-prob), for positive i
  P_i = e^{(s_i - m)/tau} / (e^{(s_i - m)/tau} + sum_{j in N} e^{s_j / tau}),
  J = (tau / N+) sum_{i in P} log P_i,   loss = -(mean of J over the usable groups).
"""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import conspo_loss, conspo_margin

torch.set_num_threads(1)
E = math.exp
LOG = math.log
NAN, INF = math.nan, math.inf


def close(actual: torch.Tensor, expected, **kw) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), **kw)


def group_a():
    """One group of four: scores (-1, -2, -3, -1.5) from rows of different lengths,
    rewards (1, 1, 0, 0); padding cells hold loud values."""
    logp = torch.tensor(
        [
            [-0.5, -1.5, 1e9],  # s = -1
            [-2.0, NAN, INF],  # s = -2
            [-3.0, -3.0, -3.0],  # s = -3
            [-1.0, -2.0, -INF],  # s = -1.5
        ],
        dtype=torch.float64,
    )
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    return logp, mask, rewards


def test_loss_by_hand_tau_one():
    logp, mask, rewards = group_a()
    loss, m = conspo_loss(logp, mask, rewards, 4, tau=1.0)
    neg = E(-3) + E(-1.5)
    p1, p2 = E(-1) / (E(-1) + neg), E(-2) / (E(-2) + neg)
    close(loss, -(LOG(p1) + LOG(p2)) / 2)
    close(m["conspo/pos_prob"], (p1 + p2) / 2)
    # mean positive score -1.5, mean negative score -2.25
    close(m["conspo/score_gap"], 0.75)
    close(m["conspo/valid_groups"], 1.0)


def test_loss_by_hand_default_tau_and_margin():
    logp, mask, rewards = group_a()
    tau, margin = 10.0, 0.5
    loss, _ = conspo_loss(logp, mask, rewards, 4, margin=margin)  # tau defaults to 10
    neg = E(-3 / tau) + E(-1.5 / tau)
    a1, a2 = E((-1 - margin) / tau), E((-2 - margin) / tau)
    j = tau / 2 * (LOG(a1 / (a1 + neg)) + LOG(a2 / (a2 + neg)))
    close(loss, -j)


def test_threshold_and_baseline_choose_the_positives():
    logp, mask, _ = group_a()
    rewards = torch.tensor([0.9, 0.6, 0.5, 0.1], dtype=torch.float64)
    # Default threshold 0.5 (strict): positives rows 0, 1 -> the same as group_a's case.
    ref, _ = conspo_loss(logp, mask, group_a()[2], 4, tau=1.0)
    got, _ = conspo_loss(logp, mask, rewards, 4, tau=1.0)
    close(got, ref.item())
    # threshold 0.7: only row 0 is positive; P_0 = e^-1 / (e^-1 + e^-2 + e^-3 + e^-1.5)
    got, _ = conspo_loss(logp, mask, rewards, 4, tau=1.0, threshold=0.7)
    close(got, -LOG(E(-1) / (E(-1) + E(-2) + E(-3) + E(-1.5))))
    # a per-row baseline replaces the threshold (ConSPO + RCC)
    got, _ = conspo_loss(logp, mask, rewards, 4, tau=1.0, baseline=torch.full((4,), 0.7))
    close(got, -LOG(E(-1) / (E(-1) + E(-2) + E(-3) + E(-1.5))))


def test_one_sided_groups_are_dropped():
    logp_a, mask_a, rewards_a = group_a()
    g = torch.Generator().manual_seed(0)
    other = torch.randn(8, 3, generator=g, dtype=torch.float64)
    logp = torch.cat([logp_a, other])
    mask = torch.cat([mask_a, torch.ones(8, 3, dtype=mask_a.dtype)])
    # group 2 all wrong, group 3 all right: both dropped, the mean is over group 1 alone
    rewards = torch.cat([rewards_a, torch.zeros(4, dtype=torch.float64),
                         torch.ones(4, dtype=torch.float64)])
    loss, m = conspo_loss(logp, mask, rewards, 4, tau=1.0)
    alone, _ = conspo_loss(logp_a, mask_a, rewards_a, 4, tau=1.0)
    close(loss, alone.item())
    close(m["conspo/valid_groups"], 1 / 3)


def test_no_usable_group_gives_zero_loss_with_grad_fn():
    logp = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, 3)
    loss, m = conspo_loss(logp, mask, torch.tensor([1.0, 1.0, 0.0, 0.0]), 2)
    assert loss.item() == 0.0
    assert loss.grad_fn is not None
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(4, 3, dtype=torch.float64))
    assert m["conspo/valid_groups"].item() == 0.0


def _closed_form_grad(scores, pos, lengths, tau, margin, n_valid):
    """d loss / d logp_t of every row from Lemma 2 and its negative-side counterpart."""
    grad = []
    n_pos = sum(pos)
    neg_sum = sum(E(s / tau) for s, p in zip(scores, pos, strict=True) if not p)
    denom = {i: E((s - margin) / tau) + neg_sum for i, s in enumerate(scores) if pos[i]}
    for i, (s, p) in enumerate(zip(scores, pos, strict=True)):
        if p:
            prob = E((s - margin) / tau) / denom[i]
            dj = (1 - prob) / n_pos  # Lemma 2: dJ/ds_i+ = (1 - P_i+) / N+
        else:
            dj = -sum(E(s / tau) / d for d in denom.values()) / n_pos
        # loss = -(1/V) sum_groups J ; d s_i / d logp_t = 1 / |o_i|
        grad.append(-dj / n_valid / lengths[i])
    return grad


def test_gradient_matches_lemma_2():
    tau, margin = 10.0, 0.01
    logp_a, mask_a, rewards_a = group_a()
    # a second usable group with a single positive and three negatives
    logp_b = torch.tensor([[-0.7, 5e8, 0], [-0.2, -0.2, 0], [-1.1, 0, 0], [-0.4, -0.4, -0.4]],
                          dtype=torch.float64)
    mask_b = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    rewards_b = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    logp = torch.cat([logp_a, logp_b]).requires_grad_(True)
    mask = torch.cat([mask_a, mask_b])
    loss, _ = conspo_loss(logp, mask, torch.cat([rewards_a, rewards_b]), 4, tau=tau, margin=margin)
    loss.backward()
    expected = _closed_form_grad([-1, -2, -3, -1.5], [1, 1, 0, 0], [2, 1, 3, 2], tau, margin, 2)
    expected += _closed_form_grad([-0.7, -0.2, -1.1, -0.4], [1, 0, 0, 0], [1, 2, 1, 3], tau,
                                  margin, 2)
    want = mask.double() * torch.tensor(expected, dtype=torch.float64).unsqueeze(1)
    close(logp.grad, want)
    # the positive gradient of the loss is negative: raising s_i+ lowers the loss
    assert (logp.grad[[0, 1, 4]][mask[[0, 1, 4]].bool()] < 0).all()


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(1)
    logp = (torch.randn(8, 4, generator=g, dtype=torch.float64) - 1).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]] * 2)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda x: conspo_loss(x, mask, rewards, 4, tau=2.0, margin=0.1)[0], (logp,)
    )


def test_padding_never_changes_the_loss():
    logp, mask, rewards = group_a()
    junk = torch.tensor([[NAN, INF]], dtype=torch.float64).expand(4, 2)
    wide = torch.cat([logp, junk], 1)
    wide_mask = torch.cat([mask, torch.zeros(4, 2, dtype=mask.dtype)], 1)
    plain, _ = conspo_loss(logp, mask, rewards, 4)
    close(conspo_loss(wide, wide_mask, rewards, 4)[0], plain.item())


# ----------------------------------------------------------------------------- margin curriculum


def test_margin_curriculum():
    # m = (M/2)(1 - cos(pi min(progress/alpha, 1))), M = 0.01, alpha = 0.3
    assert conspo_margin(0.0) == 0.0
    assert conspo_margin(0.15) == pytest.approx(0.005)  # alpha/2: cos(pi/2) = 0 -> M/2
    assert conspo_margin(0.1) == pytest.approx(0.0025)  # r = 1/3: cos(pi/3) = 1/2 -> M/4
    assert conspo_margin(0.3) == pytest.approx(0.01)  # r = 1: cos(pi) = -1 -> M
    assert conspo_margin(0.9) == pytest.approx(0.01)
    assert conspo_margin(1.5) == pytest.approx(0.01)
    assert conspo_margin(-0.2) == 0.0
    assert conspo_margin(0.25, max_margin=0.2, warmup=0.5) == pytest.approx(0.1)


# ----------------------------------------------------------------------------- bad input


def test_bad_input():
    logp, mask, rewards = group_a()
    with pytest.raises(ValueError, match="group_size=1 is too small"):
        conspo_loss(logp, mask, rewards, 1)
    with pytest.raises(ValueError, match="group_size=3 does not divide"):
        conspo_loss(logp, mask, rewards, 3)
    with pytest.raises(ValueError, match=r"rewards must have shape \(4,\)"):
        conspo_loss(logp, mask, rewards[:3], 2)
    with pytest.raises(ValueError, match=r"baseline must have shape \(4,\)"):
        conspo_loss(logp, mask, rewards, 2, baseline=torch.zeros(2))
    with pytest.raises(ValueError, match="shapes disagree"):
        conspo_loss(logp, mask[:, :2], rewards, 2)
    with pytest.raises(ValueError, match="tau must be > 0"):
        conspo_loss(logp, mask, rewards, 2, tau=0.0)
    with pytest.raises(ValueError, match="warmup must be > 0"):
        conspo_margin(0.5, warmup=0.0)
