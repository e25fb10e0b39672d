"""Intervals wherever a number is reported: eval's intervals over problems with
their counts, the trainer's summary.json counts, compare's one-seed caveat."""

from __future__ import annotations

import pytest
from rich.console import Console

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.evaluation import summarize
from contrastive_rlvr.evaluation.report import results_table
from contrastive_rlvr.run.heldout import heldout_score


def test_eval_report_has_intervals_and_counts():
    # 3 problems, n = 4, c = 0, 1, 4 (test_eval's hand case)
    correct = [[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]]
    r = summarize("hand", correct, [[0] * 4] * 3)
    assert (r.problems, r.samples, r.correct) == (3, 12, 5)
    avg = r.intervals["avg_at_n"]
    assert avg["value"] == pytest.approx(1.25 / 3)
    # Wilson over 3 problems at p = 1.25 / 3: inside [0, 1], holding the value
    assert 0.0 <= avg["ci_low"] < avg["value"] < avg["ci_high"] <= 1.0
    assert r.intervals["pass_at_k"][2]["value"] == pytest.approx(0.5)
    out = r.to_json()
    assert out["correct"] == 5 and "Wilson score interval" in out["intervals"]["method"]
    assert set(out["intervals"]["pass_at_k"]) == {"1", "2", "4"}


def test_eval_table_shows_avg_at_n_and_pass_at_1_once_and_says_why():
    r = summarize("hand[v2]", [[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]], [[0] * 4] * 3)
    console = Console(width=200, record=True)
    console.print(results_table([r], title="runs/[exp]/model  (n=4)"))
    text = console.export_text()
    assert "avg@n = pass@1" in text and "| pass@1" not in text and "pass@2" in text
    assert "k = 1 is the mean of c_i / n" in text
    assert "one column. [low, high]: 95% Wilson score interval" in " ".join(text.split())
    assert "runs/[exp]/model  (n=4)" in text and "hand[v2]" in text  # names as given
    lo, hi = r.intervals["avg_at_n"]["ci_low"], r.intervals["avg_at_n"]["ci_high"]
    assert f"0.417 [{lo:.3f}, {hi:.3f}]" in text


def test_trainer_heldout_score_counts():
    value, counts = heldout_score([[True, False], [True, True], [False, False]])
    # avg@2 = (1/2 + 1 + 0) / 3 = 0.5
    assert value == pytest.approx(0.5)
    assert (counts["problems"], counts["samples"], counts["correct"]) == (3, 6, 3)
    assert counts["ci_low"] <= 0.5 <= counts["ci_high"]


def _report(seeds: list[int]) -> dict:
    one = {"mean": 0.6, "ci_half_width": None, "ci_low": None, "ci_high": None, "n": 1}
    many = {"mean": 0.6, "ci_half_width": 0.05, "ci_low": 0.55, "ci_high": 0.65, "n": 3}
    ci = one if len(seeds) == 1 else many
    diff = dict(ci, mean=0.02)
    rows = [
        {"recipe": "grpo", "arm": "plain", "label": "GRPO", "seeds": seeds, "after": ci,
         "before": ci, "diff_vs_plain": None},
        {"recipe": "grpo", "arm": "bicc", "label": "GRPO + BiCC", "seeds": seeds, "after": ci,
         "before": ci, "diff_vs_plain": diff},
    ]  # fmt: skip
    return {"metric": "held-out avg@4", "ci": "t", "difference": "paired", "rows": rows,
            "failed": []}  # fmt: skip


def test_compare_with_one_seed_says_no_interval_exists_and_why():
    table = cmp.results_markdown(_report([0]))
    assert "| GRPO + BiCC | 60.0 (no interval) | +2.0 (no interval) |" in table
    assert "One seed: no interval exists" in table and "at least two" in table
    three = cmp.results_markdown(_report([0, 1, 2]))
    assert "One seed" not in three and "+2.0 ± 5.0" in three
