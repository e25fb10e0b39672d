"""RCC options: Reward-Confidence Correction's baseline b* = mean(R) + c Cov(R, delta)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...method_options import RCCFields, check_choices


@dataclass
class RCCOptions(RCCFields):
    """The advantage baseline corrected by the covariance of reward and confidence: the
    switch, the shared fields of :class:`RCCFields` and the TRL path's reference choices."""

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
    rcc_reference: Literal["reference", "sampling"] = field(
        default="reference",
        metadata={
            "help": "pi_ref of delta: 'reference' (the frozen initial policy) or 'sampling' "
            "(the sampling policy; delta is then taken at loss time, needs whole groups "
            "per micro-batch)."
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
        self.check_rcc_fields()
        check_choices(self, RCCOptions)  # rcc_reference, rcc_delta_pass
