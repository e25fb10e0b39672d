"""Per-benchmark statistics from a correctness matrix, as a rich table and as JSON.

For a benchmark of P problems with n samples each, ``correct[i][j]`` says
whether sample j of problem i was verified correct, and ``c_i`` counts the
correct samples of problem i:

- ``avg@n = (1/P) sum_i c_i / n`` (:func:`~contrastive_rlvr.algorithms.avg_at_n`);
- ``pass@k = (1/P) sum_i [1 - C(n - c_i, k) / C(n, k)]`` (Chen et al. 2021,
  :func:`~contrastive_rlvr.algorithms.pass_at_k`), for k = 1, 2, 4, ... up to
  n, and n itself; pass@1 equals avg@n (the estimator at k = 1 is ``c_i / n``),
  so the table shows them as one column;
- an interval for each: Wilson's score interval with the problems as trials
  (:func:`~contrastive_rlvr.stats.score_interval`; a problem's samples are
  correlated, so they count as one trial), with the counts behind it (problems,
  samples, correct samples);
- ``unparsable``: samples that stated no answer math-verify could read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table
from rich.text import Text

from ..algorithms import avg_at_n, pass_at_k
from ..stats import SCORE_INTERVAL_METHOD, score_interval

#: Level of the reported intervals.
CI_LEVEL = 0.95
INTERVAL_METHOD = SCORE_INTERVAL_METHOD
TABLE_NOTE = (
    "avg@n = pass@1: the unbiased pass@k estimator at k = 1 is the mean of c_i / n, the "
    f"same number, so it is one column. [low, high]: {int(CI_LEVEL * 100)}% {INTERVAL_METHOD}."
)


def ks_for(n: int) -> list[int]:
    """The k of pass@k reported for n samples: powers of two below n, then n."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


@dataclass
class BenchmarkReport:
    """The numbers reported for one benchmark (``pass_at_k`` keyed by k)."""

    benchmark: str
    problems: int
    n: int
    avg_at_n: float
    pass_at_k: dict[int, float]
    unparsable: int
    samples: int
    verifier_events: dict[str, int] = field(default_factory=dict)
    correct: int = 0
    """Correct samples over all problems (avg@n = correct / samples)."""
    intervals: dict[str, Any] = field(default_factory=dict)
    """``avg_at_n`` and ``pass_at_k`` (keyed by k): ``{value, ci_low, ci_high, level}``."""
    source: str | None = None
    """The file the problems were read from (None: not known, e.g. the Hub)."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        if self.intervals:
            out["intervals"] = {
                "method": INTERVAL_METHOD,
                "avg_at_n": self.intervals["avg_at_n"],
                "pass_at_k": {str(k): v for k, v in self.intervals["pass_at_k"].items()},
            }
        return out


def summarize(
    benchmark: str,
    correct: Sequence[Sequence[bool]],
    unparsed: Sequence[Sequence[bool]],
    verifier_events: dict[str, int] | None = None,
) -> BenchmarkReport:
    """A :class:`BenchmarkReport` from per-problem, per-sample correctness and parse flags."""
    if not correct:
        raise ValueError(f"{benchmark}: no problems to summarise")
    n = len(correct[0])
    if any(len(row) != n for row in correct):
        raise ValueError(f"{benchmark}: every problem needs the same number of samples")
    counts = [sum(bool(x) for x in row) for row in correct]
    per_k = {k: [pass_at_k(n, c, k) for c in counts] for k in ks_for(n)}
    passes = {k: sum(v) / len(v) for k, v in per_k.items()}
    intervals = {
        "avg_at_n": score_interval([c / n for c in counts], CI_LEVEL).to_dict(),
        "pass_at_k": {k: score_interval(v, CI_LEVEL).to_dict() for k, v in per_k.items()},
    }
    return BenchmarkReport(
        benchmark=benchmark,
        problems=len(correct),
        n=n,
        avg_at_n=avg_at_n(correct),
        pass_at_k=passes,
        unparsable=sum(sum(bool(x) for x in row) for row in unparsed),
        samples=len(correct) * n,
        verifier_events=dict(verifier_events or {}),
        correct=sum(counts),
        intervals=intervals,
    )


def _with_ci(value: float, ci: dict | None) -> str:
    if ci is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]"


def results_table(reports: Sequence[BenchmarkReport], title: str = "") -> Table:
    """One row per benchmark: problems, n, avg@n (= pass@1) and pass@k for k > 1, each
    with its interval, unparsable count; :data:`TABLE_NOTE` as the caption."""
    ks = sorted({k for r in reports for k in r.pass_at_k if k > 1})
    # Text, not markup strings: rich would read "[low, high]" (or a "[v2]" in a model's or
    # a benchmark file's name) as a style tag and drop it.
    table = Table(
        title=Text(title) if title else None, caption=Text(TABLE_NOTE), caption_justify="left"
    )
    table.add_column("benchmark")
    table.add_column("problems", justify="right")
    table.add_column("n", justify="right")
    table.add_column("avg@n = pass@1", justify="right")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("unparsable", justify="right")
    for r in reports:
        cis = r.intervals.get("pass_at_k", {})
        cells = [_with_ci(r.pass_at_k[k], cis.get(k)) if k in r.pass_at_k else "" for k in ks]
        table.add_row(
            Text(r.benchmark),
            str(r.problems),
            str(r.n),
            _with_ci(r.avg_at_n, r.intervals.get("avg_at_n")),
            *cells,
            f"{r.unparsable}/{r.samples}",
        )
    return table
