"""Confidence intervals: Student t intervals over seeds (a mean, paired differences; too
few seeds for an interval inside the metric's range is said, not printed), Wilson score
intervals of an evaluation score over its problems (avg@n, pass@k).

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


#: The range a metric can take, ``(low, high)``; None on a side without a bound.
Bounds = tuple[float | None, float | None]
#: An accuracy (avg@n, pass@k) and the difference of two.
UNIT_RANGE: Bounds = (0.0, 1.0)
DIFFERENCE_RANGE: Bounds = (-1.0, 1.0)


@dataclass(frozen=True)
class MeanCI:
    """Mean of ``n`` values and the half-width of its two-sided confidence interval.

    ``half_width = t_{1-(1-level)/2, n-1} * s / sqrt(n)`` with ``s`` the sample
    standard deviation (divide by n-1); None when n < 2. ``bounds``: the range the
    metric can take; an interval that reaches outside it (two seeds of an accuracy:
    t = 12.7 at 1 degree of freedom) says that n is too small for an interval
    (:attr:`too_few`), and is shown as such rather than as bounds no value can have.
    """

    mean: float
    half_width: float | None
    n: int
    level: float
    bounds: Bounds = (None, None)

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    @property
    def too_few(self) -> bool:
        """Whether the interval reaches outside :attr:`bounds` (so n is too small)."""
        if self.half_width is None:
            return False
        below = self.bounds[0] is not None and self.low < self.bounds[0]  # type: ignore[operator]
        above = self.bounds[1] is not None and self.high > self.bounds[1]  # type: ignore[operator]
        return below or above

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "ci_half_width": self.half_width,
            "ci_low": self.low,
            "ci_high": self.high,
            "n": self.n,
            "level": self.level,
            "range": list(self.bounds),
            "too_few": self.too_few,
        }


def mean_ci(values: Sequence[float], level: float = 0.95, bounds: Bounds = (None, None)) -> MeanCI:
    """Mean and Student t confidence interval (n-1 degrees of freedom) of ``values``;
    ``bounds``: the metric's range (:attr:`MeanCI.too_few`)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = sum(values) / n
    if n < 2:
        return MeanCI(mean, None, n, level, bounds)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return MeanCI(mean, half, n, level, bounds)


def paired_difference_ci(
    values: dict[int, float],
    baseline: dict[int, float],
    level: float = 0.95,
    bounds: Bounds = (None, None),
) -> MeanCI | None:
    """Mean and t interval of ``values[k] - baseline[k]`` over the keys (seeds) both hold.

    Pairing by seed removes the seed-to-seed spread both arms share (same SFT
    start, same held-out draws). None when no key is shared.
    """
    shared = sorted(set(values) & set(baseline))
    if not shared:
        return None
    return mean_ci([values[k] - baseline[k] for k in shared], level, bounds)


def mean_text(ci: dict, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
    """A seed mean as the reports print it: ``78.1 ± 3.5 [74.6, 81.6]`` (scaled), or,
    when the interval is missing or reaches outside the metric's range, the mean and
    why no interval is shown (``59.0 (2 seeds: too few for a 95% interval inside
    [0, 100])``)."""
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    mean = fmt.format(scale * ci["mean"])
    n = ci.get("n", 1)
    if ci.get("ci_half_width") is None:
        return f"{mean} (no interval: {n} seed{'s' if n != 1 else ''})"
    if ci.get("too_few"):
        lo, hi = (
            ("-inf" if b is None and i == 0 else "inf" if b is None else f"{scale * b:g}")
            for i, b in enumerate(ci.get("range", [None, None]))
        )
        level = int(round(100 * ci.get("level", 0.95)))
        return f"{mean} ({n} seeds: too few for a {level}% interval inside [{lo}, {hi}])"
    half, low, high = (scale * ci[k] for k in ("ci_half_width", "ci_low", "ci_high"))
    return f"{mean} ± {half:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


#: Method of the evaluation intervals (avg@n, pass@k, the run's held-out score).
SCORE_INTERVAL_METHOD = (
    "Wilson score interval with the problems as the trials (p = the score, trials = P "
    "problems): exact in form for one sample per problem; with n samples per problem a "
    "problem's share c_i / n lies in [0, 1], so its variance is at most p(1 - p) and the "
    "interval is conservative (a problem's samples are correlated, so a binomial over "
    "all P * n samples would be too narrow). Never [0, 0]: 0 of P gives [0, z^2 / (P + z^2)]"
)


@dataclass(frozen=True)
class ProportionCI:
    """A proportion ``value`` of ``trials`` and its interval ``[low, high]``."""

    value: float
    low: float
    high: float
    trials: float
    level: float

    def to_dict(self) -> dict:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high, "level": self.level}


def normal_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal (1.959964 at 0.975)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def wilson_interval(successes: float, trials: float, level: float = 0.95) -> ProportionCI:
    """Wilson's score interval (Wilson 1927) of ``successes`` out of ``trials``:

    ``(p + z^2/(2N) -+ z sqrt(p(1-p)/N + z^2/(4N^2))) / (1 + z^2/N)`` with
    ``p = successes / trials``, ``N = trials`` and ``z`` the normal ``(1+level)/2``
    quantile. Inside [0, 1] always, and never of width 0 (0 of 6: [0, 0.390]);
    ``successes`` may be fractional (a mean of per-problem shares times P)."""
    if trials <= 0:
        raise ValueError(f"trials must be > 0, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials={trials}], got {successes}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    z = normal_quantile((1 + level) / 2)
    p, n, z2 = successes / trials, trials, z * z
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # max/min: rounding must not put a bound a hair outside [0, 1] or past p
    low, high = max(0.0, min(p, center - half)), min(1.0, max(p, center + half))
    return ProportionCI(p, low, high, n, level)


def score_interval(per_problem: Sequence[float], level: float = 0.95) -> ProportionCI:
    """The interval of a score that is the mean over P problems of a per-problem value in
    [0, 1] (``c_i / n`` for avg@n, each problem's pass@k): :func:`wilson_interval` of
    ``P * mean`` out of P (:data:`SCORE_INTERVAL_METHOD` says why)."""
    values = [float(v) for v in per_problem]
    if not values:
        raise ValueError("score_interval needs at least one problem")
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError("score_interval takes per-problem values in [0, 1]")
    p = sum(values) / len(values)
    return wilson_interval(p * len(values), len(values), level)
