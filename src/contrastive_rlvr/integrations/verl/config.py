"""Our hyperparameters inside verl's actor config: a subclass of its ``PolicyLossConfig``.

Select it in a verl config with::

    actor_rollout_ref.actor.policy_loss._target_=contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig

verl builds the actor config with Hydra's ``instantiate``, so the subclass
reaches the workers (where the loss reads ``tau``) and the driver (where the
``crlvr_sync`` trainer reads the RCC and BiCC fields) alike. verl's own
fields keep their meaning: clip ranges are ``actor.clip_ratio_low/high``, the
aggregation is ``actor.loss_agg_mode``, the KL term is ``actor.use_kl_loss`` /
``kl_loss_coef`` / ``kl_loss_type``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.workers.config import PolicyLossConfig

from ...algorithms import BICC_PLACEMENTS, BICC_RATIO_MODES, RCC_BOUNDS, BiCCTemplate
from ...algorithms.advantages import DEFAULT_RCC_BOUND, TRL_ADV_EPS
from ...algorithms.bicc import BICC_PAIRINGS, FRAMING_BUDGETS
from ...algorithms.bicc_defaults import default_bicc_ratio_mode

_TEMPLATE = BiCCTemplate()

DELTA_REDUCTIONS = ("mean", "sum")
TRUNCATIONS = ("head", "tail", "middle")
KL_REFERENCES = ("conditioned", "plain")
LOSS_PREFIX = "crlvr_"


def loss_recipe(loss_mode: str) -> str:
    """The recipe a verl ``policy_loss.loss_mode`` runs, as the per-recipe tables name it:
    ``crlvr_<recipe>`` -> ``<recipe>``; verl's own losses (``vanilla``, ...) keep their
    name, which no table lists (so they take a table's default for unlisted recipes)."""
    return loss_mode.removeprefix(LOSS_PREFIX)


@dataclass
class CrlvrPolicyLossConfig(PolicyLossConfig):
    """verl's policy-loss config plus the contrastive-rlvr hyperparameters.

    Attributes:
        tau: ConSPO temperature (paper default 10).
        max_margin: ConSPO's final margin M (0.01).
        margin_warmup: share of training over which the ConSPO margin ramps up (alpha, 0.3).
        threshold: reward above which a completion counts as correct (ConSPO positives,
            BiCC partitions); 0.5 suits 0/1 rewards.
        rcc_coef: RCC's covariance coefficient c in ``b* = mean R + c Cov(R, delta)`` (2).
        rcc_delta: ``"mean"`` (per-token mean) or ``"sum"`` of ``logp - ref_logp`` for RCC.
        rcc_bound: ``"reward_range"`` (b* clamped to the group's [min R, max R], the TRL
            path's default) or ``"none"`` (the paper's formula), as TRL's ``rcc_bound``.
        adv_eps: added to the group std before dividing: TRL's 1e-4 (``TRL_ADV_EPS``), the
            TRL path's ``adv_eps`` default, so both engines' advantages are equal.
        bicc: condition the policy log-probs of the update on the opposite partition.
        bicc_context_ratio: share of ``L`` given to the added context (paper Table 3:
            0.2/0.4/0.6; 0.4 best), ``L`` = ``bicc_max_seq_len`` when set, else the batch's
            longest prompt + ``data.max_response_length`` (the TRL path's rule), capped so
            that prompt + context + completion fit in the model's positions.
        bicc_max_seq_len: as TRL's ``bicc_max_seq_len``.
        bicc_placement: as TRL's ``bicc_placement``; ``"auto"`` puts the attempts in the
            user turn of verl's chat prompts (``raw_prompt``), rendered again with the chat
            template and ``data.apply_chat_template_kwargs``.
        bicc_mix: must stay 1.0 on verl: a plain-prompt share needs a second actor forward
            per micro-batch, which verl's loss call does not make (refused, not ignored).
        bicc_header_correct, bicc_header_wrong, bicc_item_prefix, bicc_item_suffix,
            bicc_footer: the framing text, as TRL's fields of the same names.
        bicc_ratio: ``"paper"`` (old log-probs of the plain prompt) or ``"consistent"``
            (old log-probs recomputed on the conditioned prompt); unset (``None``), the
            recipe's default from the table both engines read
            (:data:`~contrastive_rlvr.algorithms.bicc_defaults.RECIPE_BICC_RATIO_MODE`,
            the recipe of ``loss_mode`` by :func:`loss_recipe`): ``consistent`` for
            ``crlvr_conspo``, ``paper`` otherwise. ConSPO's loss reads no old log-probs,
            so under it the two modes are the same update and the ``crlvr_sync`` trainer
            skips the recomputation. TRL's third mode,
            ``"conditioned_old"`` (policy on the plain prompt, old log-probs on the
            conditioned one), is refused: verl's actor update would need the plain rows
            with old log-probs taken on the conditioned ones, which this trainer does not
            build.
        bicc_framing_budget: as TRL's: ``"outside"`` (the budget pays for the attempts'
            tokens, the framing text on top; the model's positions cap the whole context)
            or ``"inside"`` (framing and attempts together).
        bicc_pairing: as TRL's: ``"partition"`` (every opposite completion of the group)
            or ``"one_opposite"`` (one each, round robin).
        bicc_kl_reference: as TRL's, with the KL loss on (``use_kl_loss`` and
            ``kl_loss_coef > 0``): ``"conditioned"`` recomputes the reference log-probs on
            the conditioned prompt in every ratio mode; ``"plain"`` keeps the plain one.
        bicc_truncation: how an opposite completion longer than its share is cut.
    """

    tau: float = 10.0
    max_margin: float = 0.01
    margin_warmup: float = 0.3
    threshold: float = 0.5
    rcc_coef: float = 2.0
    rcc_delta: str = "mean"
    rcc_bound: str = DEFAULT_RCC_BOUND
    adv_eps: float = TRL_ADV_EPS
    bicc: bool = False
    bicc_context_ratio: float = 0.4
    bicc_ratio: str | None = None
    bicc_truncation: str = "middle"
    bicc_max_seq_len: int | None = None
    bicc_placement: str = "auto"
    bicc_mix: float = 1.0
    bicc_framing_budget: str = "outside"
    bicc_pairing: str = "partition"
    bicc_kl_reference: str = "conditioned"
    bicc_header_correct: str = _TEMPLATE.header_correct
    bicc_header_wrong: str = _TEMPLATE.header_wrong
    bicc_item_prefix: str = _TEMPLATE.item_prefix
    bicc_item_suffix: str = _TEMPLATE.item_suffix
    bicc_footer: str = _TEMPLATE.footer

    @property
    def bicc_template(self) -> BiCCTemplate:
        """The framing text as set by the ``bicc_*`` template fields."""
        return BiCCTemplate.from_fields(self)

    def __post_init__(self) -> None:
        where = "actor_rollout_ref.actor.policy_loss"
        _ = self.bicc_template  # the framing text's {index} field, checked before any step
        if self.tau <= 0:
            raise ValueError(f"{where}.tau must be > 0, got {self.tau}")
        if self.max_margin < 0:
            raise ValueError(f"{where}.max_margin must be >= 0, got {self.max_margin}")
        if self.margin_warmup <= 0:
            raise ValueError(f"{where}.margin_warmup must be > 0, got {self.margin_warmup}")
        if self.adv_eps < 0:
            raise ValueError(f"{where}.adv_eps must be >= 0, got {self.adv_eps}")
        if self.rcc_delta not in DELTA_REDUCTIONS:
            raise ValueError(
                f"{where}.rcc_delta must be one of {DELTA_REDUCTIONS}, got {self.rcc_delta!r}"
            )
        if not 0.0 < self.bicc_context_ratio < 1.0:
            raise ValueError(
                f"{where}.bicc_context_ratio must be in (0, 1), got {self.bicc_context_ratio}"
            )
        if self.bicc_ratio is None:
            # Resolved once here so that every reader (driver and workers) sees one mode;
            # verl's configs are frozen after __init__.
            object.__setattr__(
                self, "bicc_ratio", default_bicc_ratio_mode(loss_recipe(self.loss_mode))
            )
        if self.bicc_ratio not in BICC_RATIO_MODES:
            raise ValueError(
                f"{where}.bicc_ratio must be one of {BICC_RATIO_MODES}, got {self.bicc_ratio!r}"
            )
        if self.bicc_ratio == "conditioned_old":
            raise ValueError(
                f"{where}.bicc_ratio='conditioned_old' is not supported on verl: its ratio "
                "takes the policy on the plain prompt and the old log-probs on the "
                "conditioned one, and verl's actor update reads both from the same rows; use "
                "'paper' or 'consistent' (or the TRL path's bicc_ratio_mode)"
            )
        for name, allowed in (
            ("bicc_framing_budget", FRAMING_BUDGETS),
            ("bicc_pairing", BICC_PAIRINGS),
            ("bicc_kl_reference", KL_REFERENCES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{where}.{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        if self.bicc_truncation not in TRUNCATIONS:
            raise ValueError(
                f"{where}.bicc_truncation must be one of {TRUNCATIONS}, "
                f"got {self.bicc_truncation!r}"
            )
        if self.rcc_bound not in RCC_BOUNDS:
            raise ValueError(
                f"{where}.rcc_bound must be one of {RCC_BOUNDS}, got {self.rcc_bound!r}"
            )
        if self.bicc_max_seq_len is not None and self.bicc_max_seq_len < 1:
            raise ValueError(
                f"{where}.bicc_max_seq_len must be positive or null, got {self.bicc_max_seq_len}"
            )
        if self.bicc_placement not in BICC_PLACEMENTS:
            raise ValueError(
                f"{where}.bicc_placement must be one of {BICC_PLACEMENTS}, "
                f"got {self.bicc_placement!r}"
            )
        if self.bicc_mix != 1.0:
            raise ValueError(
                f"{where}.bicc_mix={self.bicc_mix} is not supported on verl: the plain-prompt "
                "share needs a second actor forward per micro-batch, which verl's policy-loss "
                "call does not make; use bicc_mix=1.0 (or the TRL path)"
            )
