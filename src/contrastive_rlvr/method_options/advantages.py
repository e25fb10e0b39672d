"""The fields that turn rewards into advantages and labels on both engines: the std's
eps and the reward above which a completion counts as correct."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms.advantages import TRL_ADV_EPS
from .checks import check, finite


@dataclass
class AdvantageFields:
    """GRPO's ``(R - mean) / (std + eps)`` and the correct / wrong cut."""

    adv_eps: float = field(
        default=TRL_ADV_EPS,
        metadata={
            "help": "eps in (R - mean) / (std + eps). The default is TRL's (GRPOTrainer adds "
            "1e-4), so the project's advantages are TRL's on every recipe (docs/trl-parity.md)."
        },
    )
    reward_threshold: float = field(
        default=0.5,
        metadata={
            "help": "A completion whose total reward is above this is 'correct': BiCC's "
            "partition, ConSPO's positives and the logged accuracy."
        },
    )

    def check_advantage_fields(self, where: str = "") -> None:
        """Refuse an invalid value of these fields, naming it (``where`` + the field's name)."""
        check(
            finite(self.adv_eps) and self.adv_eps >= 0,
            where + "adv_eps",
            self.adv_eps,
            "must be a finite number >= 0",
        )
        check(
            finite(self.reward_threshold),
            where + "reward_threshold",
            self.reward_threshold,
            "must be a finite number",
        )
