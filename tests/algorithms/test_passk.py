"""Unbiased pass@k (Chen et al. 2021) against the closed form with exact binomials, and avg@n."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from contrastive_rlvr.algorithms import avg_at_n, pass_at_k


def closed_form(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k), exact (math.comb(m, k) is 0 when m < k)."""
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 2 / 5),  # k = 1 is the fraction correct: 1 - C(3,1)/C(5,1) = 1 - 3/5
        (5, 2, 2, 7 / 10),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 4, 5 / 6),  # 1 - C(7,4)/C(10,4) = 1 - 35/210
        (4, 3, 2, 1.0),  # n - c = 1 < k = 2: every draw of 2 holds a correct one
        (8, 0, 3, 0.0),  # nothing correct
        (8, 8, 8, 1.0),
        (8, 1, 8, 1.0),  # k = n draws everything
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_closed_form_everywhere_small():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(closed_form(n, c, k), abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    # C(200, 100) ~ 9e58: the product form needs no big binomials
    assert pass_at_k(200, 5, 100) == pytest.approx(closed_form(200, 5, 100), rel=1e-12)
    assert pass_at_k(1000, 1, 10) == pytest.approx(10 / 1000, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_bad_input(n, c, k):
    with pytest.raises(ValueError, match=f"n={n}"):
        pass_at_k(n, c, k)


def test_avg_at_n():
    # problem 1: 3 of 4 correct, problem 2: 0 of 2 -> (0.75 + 0) / 2
    assert avg_at_n([[True, False, True, True], [False, False]]) == pytest.approx(0.375)
    assert avg_at_n([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]) == pytest.approx(0.5)


def test_avg_at_n_bad_input():
    with pytest.raises(ValueError, match="at least one problem"):
        avg_at_n([])
    with pytest.raises(ValueError, match="problem 1 has no samples"):
        avg_at_n([[True], []])
