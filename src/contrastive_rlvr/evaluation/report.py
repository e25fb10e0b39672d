"""Per-benchmark statistics from a correctness matrix, as a rich table and as JSON.

For a benchmark of P problems with n samples each, ``correct[i][j]`` says
whether sample j of problem i was verified correct, and ``c_i`` counts the
correct samples of problem i:

- ``avg@n = (1/P) sum_i c_i / n`` (:func:`~contrastive_rlvr.algorithms.avg_at_n`);
- ``pass@k = (1/P) sum_i [1 - C(n - c_i, k) / C(n, k)]`` (Chen et al. 2021,
  :func:`~contrastive_rlvr.algorithms.pass_at_k`), for k = 1, 2, 4, ... up to
  n, and n itself; pass@1 equals avg@n;
- ``unparsable``: samples that stated no answer math-verify could read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table

from ..algorithms import avg_at_n, pass_at_k


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

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
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
    passes = {k: sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks_for(n)}
    return BenchmarkReport(
        benchmark=benchmark,
        problems=len(correct),
        n=n,
        avg_at_n=avg_at_n(correct),
        pass_at_k=passes,
        unparsable=sum(sum(bool(x) for x in row) for row in unparsed),
        samples=len(correct) * n,
        verifier_events=dict(verifier_events or {}),
    )


def results_table(reports: Sequence[BenchmarkReport], title: str = "") -> Table:
    """One row per benchmark: problems, n, avg@n, pass@k columns, unparsable count."""
    ks = sorted({k for r in reports for k in r.pass_at_k})
    table = Table(title=title or None)
    table.add_column("benchmark")
    table.add_column("problems", justify="right")
    table.add_column("n", justify="right")
    table.add_column("avg@n", justify="right")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("unparsable", justify="right")
    for r in reports:
        cells = [f"{r.pass_at_k[k]:.3f}" if k in r.pass_at_k else "" for k in ks]
        table.add_row(
            r.benchmark,
            str(r.problems),
            str(r.n),
            f"{r.avg_at_n:.3f}",
            *cells,
            f"{r.unparsable}/{r.samples}",
        )
    return table
