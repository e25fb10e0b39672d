"""Confidence intervals: Student t intervals over seeds (a mean, paired differences) and
problem-level bootstrap intervals of an evaluation score (avg@n, pass@k).

The t quantile is computed here (no SciPy dependency): the CDF of Student's t
with ``dof`` degrees of freedom is ``1/2 + integral_0^t f(x) dx`` with density
``f(x) = Gamma((dof+1)/2) / (sqrt(dof*pi) Gamma(dof/2)) * (1 + x^2/dof)^(-(dof+1)/2)``,
integrated by Simpson's rule and inverted by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

#: Simpson intervals for the t CDF; the integrand is smooth, so this is accurate to ~1e-9.
_SIMPSON_STEPS = 1000
_BISECTION_ITERS = 60


def _t_density(x: float, dof: int) -> float:
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_c - (dof + 1) / 2 * math.log1p(x * x / dof))


def t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof}")
    if t < 0:
        return 1.0 - t_cdf(-t, dof)
    n, h = _SIMPSON_STEPS, t / _SIMPSON_STEPS
    total = _t_density(0.0, dof) + _t_density(t, dof)
    for i in range(1, n):
        total += (4 if i % 2 else 2) * _t_density(i * h, dof)
    return 0.5 + total * h / 3


@lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (0.5 < p < 1)."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, dof) < p:
        hi *= 2
    for _ in range(_BISECTION_ITERS):
        mid = (lo + hi) / 2
        if t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class MeanCI:
    """Mean of ``n`` values and the half-width of its two-sided confidence interval.

    ``half_width = t_{1-(1-level)/2, n-1} * s / sqrt(n)`` with ``s`` the sample
    standard deviation (divide by n-1); None when n < 2.
    """

    mean: float
    half_width: float | None
    n: int
    level: float

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "ci_half_width": self.half_width,
            "ci_low": self.low,
            "ci_high": self.high,
            "n": self.n,
            "level": self.level,
        }


def mean_ci(values: Sequence[float], level: float = 0.95) -> MeanCI:
    """Mean and Student t confidence interval (n-1 degrees of freedom) of ``values``."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = sum(values) / n
    if n < 2:
        return MeanCI(mean, None, n, level)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return MeanCI(mean, t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n), n, level)


def paired_difference_ci(
    values: dict[int, float], baseline: dict[int, float], level: float = 0.95
) -> MeanCI | None:
    """Mean and t interval of ``values[k] - baseline[k]`` over the keys (seeds) both hold.

    Pairing by seed removes the seed-to-seed spread both arms share (same SFT
    start, same held-out draws). None when no key is shared.
    """
    shared = sorted(set(values) & set(baseline))
    if not shared:
        return None
    return mean_ci([values[k] - baseline[k] for k in shared], level)


#: Bootstrap resamples of an evaluation interval, and the generator's seed (fixed, so the
#: same results give the same interval).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
BOOTSTRAP_METHOD = (
    "percentile bootstrap over problems ({resamples} resamples, seed {seed}): the problems "
    "are resampled with replacement and the score recomputed; a problem's n samples stay "
    "together, since samples of one problem are correlated and a binomial interval over "
    "all samples would be too narrow"
)


@dataclass(frozen=True)
class BootstrapCI:
    """A score (mean over ``problems`` of per-problem values) and its bootstrap interval."""

    value: float
    low: float
    high: float
    problems: int
    level: float

    def to_dict(self) -> dict:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high,
                "level": self.level}  # fmt: skip


def bootstrap_mean_ci(
    per_problem: Sequence[float],
    level: float = 0.95,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> BootstrapCI:
    """Mean of ``per_problem`` (P values, e.g. ``c_i / n`` for avg@n or each problem's
    pass@k) and its percentile bootstrap interval: ``resamples`` draws of P problems with
    replacement, the interval the ``(1-level)/2`` and ``(1+level)/2`` quantiles of their
    means. With n = 1 sample per problem this is the binomial proportion's interval
    (about ``p +- 1.96 sqrt(p(1-p)/P)`` for large P)."""
    import numpy as np

    values = np.asarray(per_problem, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_mean_ci needs at least one problem")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapCI(float(values.mean()), float(low), float(high), int(values.size), level)
