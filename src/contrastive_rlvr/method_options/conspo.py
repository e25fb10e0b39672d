"""ConSPO's fields both engines read: the temperature and the margin curriculum
(arXiv:2605.12969, docs/algorithms.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import check, finite


@dataclass
class ConSPOFields:
    """The InfoNCE temperature tau and the cosine margin ramp to ``M`` over ``alpha``."""

    conspo_tau: float = field(default=10.0, metadata={"help": "ConSPO temperature tau."})
    conspo_max_margin: float = field(default=0.01, metadata={"help": "ConSPO final margin M."})
    conspo_warmup: float = field(
        default=0.3, metadata={"help": "Share of training over which the margin ramps up (alpha)."}
    )

    def check_conspo_fields(self, where: str = "") -> None:
        """Refuse an invalid value of these fields, naming it (``where`` + the field's name)."""
        tau, margin, warmup = self.conspo_tau, self.conspo_max_margin, self.conspo_warmup
        check(finite(tau) and tau > 0, where + "conspo_tau", tau, "must be a finite number > 0")
        check(
            finite(margin) and margin >= 0,
            where + "conspo_max_margin",
            margin,
            "must be a finite number >= 0",
        )
        check(
            finite(warmup) and warmup > 0,
            where + "conspo_warmup",
            warmup,
            "must be a finite number > 0",
        )
