"""Intervals inside the range a metric can take: Wilson's score interval for a proportion
(never [0, 0] from 0 of 6), and a seed mean whose t interval leaves the metric's range
said to rest on too few seeds instead of printed (compare, the HTML report). Every
expected value is worked out by hand below."""

from __future__ import annotations

import math

import pytest

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.evaluation import summarize
from contrastive_rlvr.html_report import _ci_text
from contrastive_rlvr.run.heldout import heldout_score
from contrastive_rlvr.stats import (
    UNIT_RANGE,
    mean_ci,
    mean_text,
    score_interval,
    wilson_interval,
)

Z = 1.959964  # the normal 0.975 quantile
Z2 = Z * Z  # 3.841459


def test_wilson_of_none_right_is_not_a_point():
    # 0 of 6: center = (z^2/12) / (1 + z^2/6), half = the same, so the interval is
    # [0, z^2 / (6 + z^2)] = [0, 3.841459 / 9.841459] = [0, 0.390334]
    ci = wilson_interval(0, 6)
    assert ci.value == 0.0 and ci.low == 0.0
    assert ci.high == pytest.approx(Z2 / (6 + Z2), abs=2e-6)
    assert ci.high == pytest.approx(0.390334, abs=2e-6)


def test_wilson_three_of_ten():
    # p = 0.3, z^2/n = 0.3841459: center = (0.3 + 0.1920729) / 1.3841459 = 0.355506,
    # half = (1.959964 / 1.3841459) * sqrt(0.3 * 0.7 / 10 + 3.841459 / 400)
    #      = 1.416009 * sqrt(0.021 + 0.00960365) = 1.416009 * 0.1749396 = 0.247716
    ci = wilson_interval(3, 10)
    assert ci.low == pytest.approx(0.355506 - 0.247716, abs=2e-6)  # 0.107790
    assert ci.high == pytest.approx(0.355506 + 0.247716, abs=2e-6)  # 0.603222


def test_wilson_all_right_mirrors_none_right():
    ci = wilson_interval(6, 6)
    assert ci.high == 1.0
    assert ci.low == pytest.approx(1 - Z2 / (6 + Z2), abs=1e-6)  # 0.609667


def test_score_interval_counts_problems_not_samples():
    # 4 problems, n = 2, shares (1, 0.5, 0, 0.5): p = 0.5 over 4 trials;
    # center = 0.5, half = (Z / (1 + Z2/4)) * sqrt(0.25/4 + Z2/64)
    ci = score_interval([1.0, 0.5, 0.0, 0.5])
    half = Z / (1 + Z2 / 4) * math.sqrt(0.25 / 4 + Z2 / 64)  # 0.5 * 0.7... = 0.350
    assert ci.low == pytest.approx(0.5 - half, abs=2e-6)
    assert ci.high == pytest.approx(0.5 + half, abs=2e-6)


def test_trainer_summary_of_none_right_has_a_width():
    # held-out 6 problems, eval_n = 1, none right: the issue's [0.000, 0.000]
    _, counts = heldout_score([[False]] * 6)
    assert counts["ci_low"] == 0.0
    assert counts["ci_high"] == pytest.approx(0.390334, abs=2e-6)
    assert "Wilson" in counts["interval"]


def test_eval_report_of_none_right_has_a_width():
    r = summarize("hand", [[0, 0]] * 6, [[0, 0]] * 6)
    assert r.intervals["avg_at_n"]["ci_high"] == pytest.approx(0.390334, abs=2e-6)
    assert r.intervals["pass_at_k"][2]["ci_high"] == pytest.approx(0.390334, abs=2e-6)


def _two_seed_ci(a: float, b: float) -> dict:
    return mean_ci([a, b], 0.95, UNIT_RANGE).to_dict()


def test_two_seeds_whose_interval_leaves_0_100_say_too_few():
    # the issue's case: seeds 0.54, 0.64: mean 0.59, s = 0.0707107, t(0.975, 1) = 12.7062,
    # half = 12.7062 * 0.0707107 / sqrt(2) = 0.635310: [-0.045, 1.225], outside [0, 1]
    ci = _two_seed_ci(0.54, 0.64)
    assert ci["ci_half_width"] == pytest.approx(0.635310, abs=1e-5)
    assert ci["too_few"] is True
    text = mean_text(ci)
    assert text == "59.0 (2 seeds: too few for a 95% interval inside [0, 100])"
    assert "-4.5" not in _ci_text(ci) and "122.5" not in _ci_text(ci)


def test_two_close_seeds_keep_their_interval():
    # 0.59, 0.60: half = 12.7062 * 0.00707107 / sqrt(2) = 0.0635310: [0.5315, 0.6585]... in
    # range, printed as usual
    ci = _two_seed_ci(0.59, 0.60)
    assert ci["too_few"] is False
    assert mean_text(ci) == "59.5 ± 6.4 [53.1, 65.9]"


def test_compare_table_says_too_few_for_the_issue_case():
    after = _two_seed_ci(0.54, 0.64)
    row = {"recipe": "grpo", "arm": "plain", "label": "GRPO", "seeds": [0, 1], "after": after,
           "before": after, "diff_vs_plain": None}  # fmt: skip
    report = {"metric": "held-out avg@4", "ci": "t", "difference": "paired", "rows": [row],
              "failed": []}  # fmt: skip
    table = cmp.results_markdown(report)
    assert "63.5" not in table
    assert "| GRPO | 59.0 (2 seeds: too few for a 95% interval inside [0, 100]) |" in table
