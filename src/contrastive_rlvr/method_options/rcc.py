"""RCC's fields both engines read: the baseline ``b* = mean(R) + c Cov(R, delta)``'s
coefficient, delta's token reduction and the bound (docs/rcc.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms.advantages import DEFAULT_RCC_BOUND, DeltaReduction, RccBound
from .checks import check, check_choices, finite


@dataclass
class RCCFields:
    """The advantage baseline corrected by the covariance of reward and confidence."""

    rcc_coef: float = field(
        default=2.0, metadata={"help": "c in b* = mean(R) + c * Cov(R, delta) (paper: 2)."}
    )
    rcc_delta: DeltaReduction = field(
        default="mean",
        metadata={"help": "delta = 'mean' or 'sum' over tokens of log pi_theta - log pi_ref."},
    )
    rcc_bound: RccBound = field(
        default=DEFAULT_RCC_BOUND,
        metadata={
            "help": "Clamp the RCC baseline to the group's [min R, max R] ('reward_range', "
            "default; never worse in the exact bandit study, docs/rcc.md) or 'none' (the "
            "paper's formula, which can give wrong answers a positive advantage)."
        },
    )

    def check_rcc_fields(self, where: str = "") -> None:
        """Refuse an invalid value of these fields, naming it (``where`` + the field's name)."""
        check(finite(self.rcc_coef), where + "rcc_coef", self.rcc_coef, "must be finite")
        check_choices(self, RCCFields, where)
