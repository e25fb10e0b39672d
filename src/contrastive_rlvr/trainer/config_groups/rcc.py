"""RCC options: Reward-Confidence Correction's baseline b* = mean(R) + c Cov(R, delta)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...algorithms import DEFAULT_RCC_BOUND, RCC_BOUNDS
from .common import check


@dataclass
class RCCOptions:
    """The advantage baseline corrected by the covariance of reward and confidence."""

    help_group: ClassVar[str] = "RCC (Reward-Confidence Correction)"

    rcc: bool = field(
        default=False,
        metadata={
            "help": "Reward-Confidence Correction: baseline mean(R) + rcc_coef * Cov(R, delta). "
            "Its derivation assumes samples from another policy weighted by w = exp(delta); on "
            "GRPO's on-policy samples with the frozen reference it raised the gradient variance "
            "in every measurement (exact bandit x1.3-x1.9, embedded model +5% to +13%); see "
            "docs/rcc.md."
        },
    )
    rcc_coef: float = field(
        default=2.0, metadata={"help": "c in b* = mean(R) + c * Cov(R, delta) (paper: 2)."}
    )
    rcc_delta: Literal["mean", "sum"] = field(
        default="mean",
        metadata={"help": "delta = 'mean' or 'sum' over tokens of log pi_theta - log pi_ref."},
    )
    rcc_reference: Literal["reference", "sampling"] = field(
        default="reference",
        metadata={
            "help": "pi_ref of delta: 'reference' (the frozen initial policy) or 'sampling' "
            "(the sampling policy; delta is then taken at loss time, needs whole groups "
            "per micro-batch)."
        },
    )
    rcc_bound: Literal["none", "reward_range"] = field(
        default=DEFAULT_RCC_BOUND,
        metadata={
            "help": "Clamp the RCC baseline to the group's [min R, max R] ('reward_range', "
            "default; never worse in the exact bandit study, docs/rcc.md) or 'none' (the "
            "paper's formula, which can give wrong answers a positive advantage)."
        },
    )

    rcc_delta_pass: Literal["auto", "stage"] = field(
        default="auto",
        metadata={
            "help": "Where log pi_theta(o|q) for the frozen reference's delta comes from on "
            "on-policy batches. 'auto': from the loss's own forward (no separate no-grad policy "
            "pass; the same advantages) when BiCC, VeriGate, OC-GRPO and the delta diagnostics "
            "are off and every micro-batch holds whole groups, else a separate pass (the "
            "reason is logged). 'stage': always the separate pass. Off-policy batches use "
            "TRL's old log-probs either way (docs/performance.md). Read only with rcc on and "
            "rcc_reference='reference'."
        },
    )

    def validate_rcc(self) -> None:
        check(math.isfinite(self.rcc_coef), "rcc_coef", self.rcc_coef, "must be finite")
        check(
            self.rcc_delta in ("mean", "sum"), "rcc_delta", self.rcc_delta, "choose 'mean' or 'sum'"
        )
        check(
            self.rcc_reference in ("reference", "sampling"),
            "rcc_reference",
            self.rcc_reference,
            "choose 'reference' or 'sampling'",
        )
        check(
            self.rcc_delta_pass in ("auto", "stage"),
            "rcc_delta_pass",
            self.rcc_delta_pass,
            "choose 'auto' or 'stage'",
        )
        check(
            self.rcc_bound in RCC_BOUNDS,
            "rcc_bound",
            self.rcc_bound,
            f"choose one of {', '.join(RCC_BOUNDS)}",
        )
