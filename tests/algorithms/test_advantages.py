"""Group advantages (GRPO, Dr.GRPO), the RCC baseline and the collapse rate, checked
against values worked out by hand from the formulas in docs/algorithms.md."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import (
    collapse_rate,
    group_advantages,
    group_covariance,
    rcc_advantages,
    rcc_baseline,
    sequence_delta,
)

torch.set_num_threads(1)
EPS = 1e-6  # the package default


def close(actual: torch.Tensor, expected, **kw) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, **kw)


# ----------------------------------------------------------------------------- group_advantages


def test_group_advantages_bessel_std_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    adv = group_advantages(rewards, 4)
    # Group 1: mean 0.25, deviations (0.75, -0.25, -0.25, -0.25);
    # Bessel var = (0.75^2 + 3 * 0.25^2) / 3 = 0.75 / 3 = 0.25 -> std 0.5.
    g1 = [0.75 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS)]
    # Group 2: mean 5, deviations (-3, -1, 1, 3); Bessel var = (9+1+1+9)/3 = 20/3.
    s2 = math.sqrt(20 / 3) + EPS
    g2 = [-3 / s2, -1 / s2, 1 / s2, 3 / s2]
    close(adv, g1 + g2)


def test_group_advantages_is_not_population_std():
    # Population std of (1, 0) is 0.5 (A = +-1); the Bessel std is sqrt(0.5) (A = +-sqrt(0.5)).
    adv = group_advantages(torch.tensor([1.0, 0.0]), 2, eps=0.0)
    close(adv, [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])


def test_group_advantages_eps_is_added_to_the_std():
    # (1, 0, 0, 0): std 0.5; with eps 0.5 the divisor is 1.0 -> A = R - mean.
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, eps=0.5)
    close(adv, [0.75, -0.25, -0.25, -0.25])


def test_group_advantages_without_std_is_dr_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    adv = group_advantages(rewards, 4, scale_by_std=False)
    close(adv, [0.75, -0.25, -0.25, -0.25, -3.0, -1.0, 1.0, 3.0])


@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_all_equal_groups_give_exact_zero(scale_by_std, eps):
    # 0.1 three times: in float64 the naive R - mean(R) is a rounding error, not 0,
    # and its std is ~1e-17, so (R - mean) / std would be O(1) garbage.
    r = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)
    assert (r - r.mean()).abs().max() > 0  # the trap is real
    rewards = torch.cat(
        [
            r,
            torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64),
            torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64),
        ]
    )
    adv = group_advantages(rewards, 3, scale_by_std=scale_by_std, eps=eps)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv[:6], torch.zeros(6, dtype=torch.float64))
    assert (adv[6:] != 0).all()


# ----------------------------------------------------------------------------- sequence_delta


def test_sequence_delta_mean_and_sum_ignore_masked_cells():
    inf, nan = math.inf, math.nan
    logp = torch.tensor([[-1.0, -2.0, 1e9], [-0.5, inf, nan]])
    ref = torch.tensor([[-1.5, -1.0, nan], [-1.0, -inf, 1e9]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # Row 0: diffs (0.5, -1.0) -> mean -0.25, sum -0.5. Row 1: diff 0.5.
    close(sequence_delta(logp, ref, mask), [-0.25, 0.5])
    close(sequence_delta(logp, ref, mask, reduce="sum"), [-0.5, 0.5])


def test_sequence_delta_empty_row_is_zero_and_gradient_is_clean():
    logp = torch.tensor([[-1.0, 1e9], [math.nan, -math.inf]], requires_grad=True)
    ref = torch.zeros(2, 2)
    mask = torch.tensor([[1, 0], [0, 0]])
    delta = sequence_delta(logp, ref, mask)
    close(delta.detach(), [-1.0, 0.0])
    delta.sum().backward()
    # d delta_0 / d logp_00 = 1 / |o_0| = 1; every masked cell gets exactly 0.
    close(logp.grad, [[1.0, 0.0], [0.0, 0.0]])


def test_sequence_delta_bad_input():
    with pytest.raises(ValueError, match="shapes disagree"):
        sequence_delta(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="reduce"):
        sequence_delta(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), reduce="max")


# ----------------------------------------------------------------------------- RCC


def test_group_covariance_is_population_covariance():
    x = torch.tensor([1.0, 0.0, 1.0, 0.0])
    y = torch.tensor([0.3, 0.1, 0.2, 0.2])
    # means 0.5 and 0.2; products (0.5)(0.1) + (-0.5)(-0.1) + 0 + 0 = 0.1; / G=4 -> 0.025
    # (the Bessel version would be 0.1 / 3).
    close(group_covariance(x, y, 4), [0.025])


def test_rcc_baseline_and_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    delta = torch.tensor([0.3, 0.1, 0.2, 0.2])
    # b* = mean R + 2 Cov(R, delta) = 0.5 + 2 * 0.025 = 0.55
    close(rcc_baseline(rewards, delta, 4), [0.55] * 4)
    close(rcc_baseline(rewards, delta, 4, coef=1.0), [0.525] * 4)
    # R - b* = (0.45, -0.55, 0.45, -0.55); Bessel std of (1,0,1,0) = sqrt((4 * 0.25) / 3).
    std = math.sqrt(1 / 3) + EPS
    close(rcc_advantages(rewards, delta, 4), [0.45 / std, -0.55 / std, 0.45 / std, -0.55 / std])
    close(rcc_advantages(rewards, delta, 4, scale_by_std=False), [0.45, -0.55, 0.45, -0.55])
    # coef = 1: b* = 0.525 -> R - b* = (0.475, -0.525, ...)
    close(
        rcc_advantages(rewards, delta, 4, coef=1.0, scale_by_std=False),
        [0.475, -0.525, 0.475, -0.525],
    )


def test_rcc_groups_are_independent():
    # Two groups; the second has delta uncorrelated with R (Cov = 0) -> plain centring.
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    delta = torch.tensor([0.3, 0.1, 0.2, 0.2, 0.5, 0.5, 0.5, 0.5])
    adv = rcc_advantages(rewards, delta, 4, scale_by_std=False)
    close(adv, [0.45, -0.55, 0.45, -0.55, 0.5, -0.5, -0.5, 0.5])


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_rcc_with_zero_coef_is_group_advantages(scale_by_std):
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (24,), generator=g).double()
    delta = torch.randn(24, generator=g, dtype=torch.float64)
    close(
        rcc_advantages(rewards, delta, 6, coef=0.0, scale_by_std=scale_by_std),
        group_advantages(rewards, 6, scale_by_std=scale_by_std),
    )
    # and a non-zero coefficient really changes the result (the test can fail)
    assert not torch.allclose(
        rcc_advantages(rewards, delta, 6, scale_by_std=scale_by_std),
        group_advantages(rewards, 6, scale_by_std=scale_by_std),
    )


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_rcc_all_equal_group_is_exact_zero(eps):
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 1.0], dtype=torch.float64)
    delta = torch.tensor([5.0, -3.0, 1e3, 0.1, 0.2, 0.3], dtype=torch.float64)
    adv = rcc_advantages(rewards, delta, 3, eps=eps)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv[:3], torch.zeros(3, dtype=torch.float64))
    # the all-equal group's baseline is exactly its mean: no covariance leaks in
    unbounded = rcc_baseline(rewards, delta, 3, bound="none")[:3]
    assert torch.equal(unbounded, rewards[:3].mean().expand(3))
    # bounded to [min R, max R] it is exactly the common reward (the float mean
    # of three 0.1 may differ from 0.1 in the last bit)
    assert torch.equal(rcc_baseline(rewards, delta, 3, bound="reward_range")[:3], rewards[:3])


def test_rcc_bound_the_issue_example_by_hand():
    # R = (1, 0, 0, 0), delta = (0, 0, 0, 5): mean R = 0.25; centred R = (.75, -.25,
    # -.25, -.25), centred delta = (-1.25, -1.25, -1.25, 3.75);
    # Cov = (-.9375 + .3125 + .3125 - .9375) / 4 = -0.3125; b* = 0.25 - 0.625 = -0.375.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    delta = torch.tensor([0.0, 0.0, 0.0, 5.0])
    close(rcc_baseline(rewards, delta, 4, bound="none"), [-0.375] * 4)
    # unbounded: the wrong rows get +0.375
    close(
        rcc_advantages(rewards, delta, 4, bound="none", scale_by_std=False),
        [1.375, 0.375, 0.375, 0.375],
    )
    # bounded to [min R, max R] = [0, 1]: b* = 0, the wrong rows get exactly 0
    close(rcc_baseline(rewards, delta, 4, bound="reward_range"), [0.0] * 4)
    close(
        rcc_advantages(rewards, delta, 4, bound="reward_range", scale_by_std=False),
        [1.0, 0.0, 0.0, 0.0],
    )
    # with std: Bessel std of (1, 0, 0, 0) = sqrt(0.75 / 3) = 0.5
    close(rcc_advantages(rewards, delta, 4, bound="reward_range"), [1 / (0.5 + EPS), 0, 0, 0])


def test_rcc_bound_clamps_above_and_leaves_inner_baselines_alone():
    # Group 1: R = (1, 1, 0, 0.5), delta = (2, 2, -2, 0): mean 0.625; centred R
    # (.375, .375, -.625, -.125), centred delta (1.5, 1.5, -2.5, -.5);
    # Cov = (.5625 + .5625 + 1.5625 + .0625) / 4 = 0.6875; b* = 0.625 + 1.375 = 2.0
    # -> clamped to max R = 1.
    # Group 2: the first by-hand case (b* = 0.55, inside [0, 1]): unchanged.
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0])
    delta = torch.tensor([2.0, 2.0, -2.0, 0.0, 0.3, 0.1, 0.2, 0.2])
    close(rcc_baseline(rewards, delta, 4, bound="none"), [2.0] * 4 + [0.55] * 4)
    close(rcc_baseline(rewards, delta, 4), [1.0] * 4 + [0.55] * 4)  # default: reward_range
    close(
        rcc_advantages(rewards, delta, 4, scale_by_std=False),
        [0.0, 0.0, -1.0, -0.5, 0.45, -0.55, 0.45, -0.55],
    )


def test_rcc_bound_rejects_an_unknown_name():
    with pytest.raises(ValueError, match="unknown RCC bound 'clip'.*none, reward_range"):
        rcc_baseline(torch.tensor([1.0, 0.0]), torch.zeros(2), 2, bound="clip")


def test_rcc_baseline_carries_no_gradient():
    delta = torch.tensor([0.3, 0.1, 0.2, 0.2], requires_grad=True)
    adv = rcc_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), delta, 4)
    assert not adv.requires_grad


# ----------------------------------------------------------------------------- collapse rate


def test_collapse_rate_by_hand():
    # groups (1,1) equal, (0,1) not, (0,0) equal, (0.1,0.1) equal -> 3 of 4
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.1, 0.1])
    close(collapse_rate(rewards, 2), 0.75)
    close(collapse_rate(torch.tensor([0.0, 1.0, 1.0, 0.0]), 2), 0.0)


# ----------------------------------------------------------------------------- bad input


def test_group_size_must_divide_rows():
    with pytest.raises(ValueError, match=r"group_size=2 does not divide the number of rows \(5\)"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="does not divide"):
        rcc_advantages(torch.zeros(5), torch.zeros(5), 2)
    with pytest.raises(ValueError, match="does not divide"):
        rcc_baseline(torch.zeros(5), torch.zeros(5), 2)
    with pytest.raises(ValueError, match="does not divide"):
        collapse_rate(torch.zeros(5), 2)


def test_group_of_one_is_rejected_where_a_group_is_needed():
    for fn in (
        lambda: group_advantages(torch.zeros(4), 1),
        lambda: rcc_advantages(torch.zeros(4), torch.zeros(4), 1),
        lambda: group_covariance(torch.zeros(4), torch.zeros(4), 1),
    ):
        with pytest.raises(ValueError, match="group_size=1 is too small"):
            fn()


def test_delta_shape_must_match_rewards():
    with pytest.raises(ValueError, match=r"delta must have shape \(4,\)"):
        rcc_advantages(torch.zeros(4), torch.zeros(3), 2)
    with pytest.raises(ValueError, match="shapes disagree"):
        group_covariance(torch.zeros(4), torch.zeros(6), 2)


def test_integer_rewards_are_taken_as_floats():
    # [1, 0 | 1, 1] as int64: group 1 mean 0.5, Bessel std sqrt(0.5); group 2 all equal.
    rewards = torch.tensor([1, 0, 1, 1])
    adv = group_advantages(rewards, 2)
    s = 0.5**0.5
    torch.testing.assert_close(adv, torch.tensor([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.0, 0.0]))
    delta = torch.tensor([0.2, -0.2, 0.0, 0.0])
    torch.testing.assert_close(
        rcc_advantages(rewards, delta, 2, scale_by_std=False),
        # cov = ((0.5)(0.2) + (-0.5)(-0.2)) / 2 = 0.1; b* = 0.5 + 0.2
        torch.tensor([1 - 0.7, 0 - 0.7, 0.0, 0.0]),
    )
