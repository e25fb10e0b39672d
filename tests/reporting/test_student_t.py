"""Student t quantiles and intervals against printed tables and hand arithmetic."""

from __future__ import annotations

import math

import pytest

from contrastive_rlvr.stats import mean_ci, paired_difference_ci, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("dof", "expected"),
    # two-sided 95% critical values t_{0.975, dof} from any printed t table
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (10, 2.2281), (30, 2.0423)],
)
def test_t_quantile_matches_tables(dof, expected):
    assert t_quantile(0.975, dof) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_closed_form_dof_1():
    # dof 1 is the Cauchy distribution: CDF(t) = 1/2 + atan(t) / pi; at t = 1 that is 0.75
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-9)
    assert t_cdf(-1.0, 1) == pytest.approx(0.25, abs=1e-9)


def test_mean_ci_by_hand():
    # values 0.70, 0.80, 0.75: mean 0.75; deviations -0.05, 0.05, 0 -> s^2 = 0.005 / 2 = 0.0025,
    # s = 0.05; half-width = t_{0.975,2} * s / sqrt(3) = 4.302653 * 0.05 / 1.7320508 = 0.1242070
    ci = mean_ci([0.70, 0.80, 0.75])
    assert ci.mean == pytest.approx(0.75)
    assert ci.half_width == pytest.approx(4.302653 * 0.05 / math.sqrt(3), abs=1e-6)
    assert ci.half_width == pytest.approx(0.1242070, abs=1e-6)
    assert ci.low == pytest.approx(0.75 - 0.1242070, abs=1e-6)


def test_mean_ci_one_value_has_no_interval():
    ci = mean_ci([0.4])
    assert ci.mean == 0.4 and ci.half_width is None and ci.low is None


def test_paired_difference_uses_shared_seeds_only():
    # seed 3 has no baseline and is left out; differences 0.04, 0.02, 0.05 -> mean 0.036667
    # deviations 0.003333, -0.016667, 0.013333 -> squares sum 4.6667e-4, s^2 = 2.3333e-4,
    # s = 0.0152753; half-width = 4.302653 * 0.0152753 / sqrt(3) = 0.0379462
    arm = {0: 0.74, 1: 0.82, 2: 0.80, 3: 0.99}
    plain = {0: 0.70, 1: 0.80, 2: 0.75}
    ci = paired_difference_ci(arm, plain)
    assert ci.n == 3
    assert ci.mean == pytest.approx(0.0366667, abs=1e-6)
    assert ci.half_width == pytest.approx(0.0379462, abs=1e-6)
    assert paired_difference_ci({5: 1.0}, plain) is None


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])
    with pytest.raises(ValueError, match="p must be"):
        t_quantile(0.3, 2)
    with pytest.raises(ValueError, match="dof"):
        t_cdf(1.0, 0)
