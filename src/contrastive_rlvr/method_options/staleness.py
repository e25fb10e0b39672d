"""What the methods mean when a rollout is ``k`` weight versions old (docs/algorithms.md,
"Stale rollouts"): the ratio's denominator, RCC's delta and covariance over off-policy
samples, ConSPO over a group that mixes weight versions.

One vocabulary for both engines. verl's asynchronous modes (``crlvr_colocate_async``,
``crlvr_separate_async``) read these fields; the TRL path generates with the weights it
updates (``GRPOTrainer``: no stale rows, ``k = 0``), where every choice below is the
on-policy method, so it has nothing to read yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .checks import check_choices

StaleRatio = Literal["sampler", "proximal"]
RCCOffPolicy = Literal["importance_weighted", "as_sampled", "refuse"]
MixedVersions = Literal["allow", "refuse"]


@dataclass
class StalenessFields:
    """The choices for stale rows (module docstring)."""

    stale_ratio: StaleRatio | None = field(
        default=None,
        metadata={
            "help": "Denominator of the update's ratio pi_theta / pi_old: 'sampler' (the "
            "rollout's own log-probs, the policy that drew the tokens, k versions old) or "
            "'proximal' (recomputed by the trainer's weights at the start of the step, "
            "verl's decoupled anchor). Unset: 'sampler' in an asynchronous mode, "
            "'proximal' in a synchronous one (k = 0: the two are one policy)."
        },
    )
    rcc_offpolicy: RCCOffPolicy = field(
        default="importance_weighted",
        metadata={
            "help": "RCC over stale rows: 'importance_weighted' (the group's mean and "
            "Cov(R, delta) weighted by pi_proximal / pi_sampler, self-normalised; rows "
            "of the current version weigh 1), 'as_sampled' (the stale rows as if "
            "on-policy: a declared approximation, bias in docs/algorithms.md) or "
            "'refuse' (an asynchronous mode with RCC is refused at start)."
        },
    )
    conspo_mixed_versions: MixedVersions = field(
        default="allow",
        metadata={
            "help": "ConSPO when a group's rows come from different weight versions: "
            "'allow' (its scores are the current policy's and it reads no old "
            "log-probs, so the group is still a valid contrast; the share is logged) "
            "or 'refuse' (the step stops, naming the group)."
        },
    )

    def check_staleness_fields(self, where: str = "") -> None:
        """Refuse a value outside the choices, naming it (``where`` + the field's name)."""
        check_choices(self, StalenessFields, where)
