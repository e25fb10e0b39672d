"""Evaluation statistics: the unbiased pass@k estimator and avg@n."""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021).

    ``1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1..n} (1 - k/i)``
    (no large binomials), and 1.0 when ``n - c < k``.
    """
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def avg_at_n(correct: Sequence[Sequence[bool | float]]) -> float:
    """avg@n: mean over problems of the fraction of that problem's n samples that are correct."""
    if not correct:
        raise ValueError("avg_at_n needs at least one problem")
    fractions = []
    for i, row in enumerate(correct):
        if len(row) == 0:
            raise ValueError(f"problem {i} has no samples")
        fractions.append(sum(float(x) for x in row) / len(row))
    return sum(fractions) / len(fractions)
