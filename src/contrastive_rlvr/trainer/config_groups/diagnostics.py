"""Diagnostics options: the delta log, gradient variance and per-completion dumps
(the metrics are documented in docs/metrics.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...method_options import check


@dataclass
class DiagnosticsOptions:
    """What is measured and logged beyond the loss."""

    help_group: ClassVar[str] = "Diagnostics"

    log_delta: bool = field(
        default=True,
        metadata={
            "help": "Log delta = log pi_old - log pi_ref and Cov(R, delta) even without RCC "
            "(one no-grad forward of the frozen reference per step)."
        },
    )
    diagnostics_every: int = field(
        default=25,
        metadata={
            "help": "At step 1, every this many steps and the last step: gradient variance with "
            "and without the RCC baseline and the ratio margin of correct vs wrong completions "
            "(docs/metrics.md). 0: off."
        },
    )
    diagnostics_directions: int = field(
        default=4,
        metadata={
            "help": "Random directions the gradient-variance estimate projects on (memory: this "
            "many copies of the parameters)."
        },
    )
    deltas_every: int = field(
        default=5,
        metadata={
            "help": "At step 1, every this many steps and the last step: write each completion's "
            "reward, delta and advantage to deltas.jsonl. 0: off."
        },
    )

    def validate_diagnostics(self) -> None:
        for name in ("diagnostics_every", "deltas_every"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0 (0: off)")
        check(
            self.diagnostics_directions >= 1,
            "diagnostics_directions",
            self.diagnostics_directions,
            "must be >= 1",
        )
