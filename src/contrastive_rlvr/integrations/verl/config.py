"""Our hyperparameters inside verl's actor config: a subclass of its ``PolicyLossConfig``.

Select it in a verl config with::

    actor_rollout_ref.actor.policy_loss._target_=contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig

verl builds the actor config with Hydra's ``instantiate``, so the subclass
reaches the workers (where the loss reads ``conspo_tau``) and the driver (where the
``crlvr_sync`` trainer reads the RCC and BiCC fields) alike. verl's own
fields keep their meaning: clip ranges are ``actor.clip_ratio_low/high``, the
aggregation is ``actor.loss_agg_mode``, the KL term is ``actor.use_kl_loss`` /
``kl_loss_coef`` / ``kl_loss_type``.

The project's fields are the TRL path's: the same names, defaults, choices and checks,
inherited from the shared groups of :mod:`contrastive_rlvr.method_options` (the TRL
path's ``RLVRConfig`` inherits the same ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verl.workers.config import PolicyLossConfig

from ...algorithms.bicc_defaults import default_bicc_ratio_mode
from ...method_options import (
    SHARED_GROUPS,
    STALENESS_GROUPS,
    AdvantageFields,
    BiCCFields,
    ConSPOFields,
    RCCFields,
    StalenessFields,
    check_field_types,
)

LOSS_PREFIX = "crlvr_"
#: The option groups of the verl config: the shared ones and the stale-rollout ones.
VERL_GROUPS = (*SHARED_GROUPS, *STALENESS_GROUPS)
#: Where the fields sit in a verl config; errors name a field by its full path.
WHERE = "actor_rollout_ref.actor.policy_loss."
#: The names of 0.1.0's verl config -> the TRL path's names they now take.
RENAMED = {
    "tau": "conspo_tau",
    "max_margin": "conspo_max_margin",
    "margin_warmup": "conspo_warmup",
    "threshold": "reward_threshold",
    "bicc_ratio": "bicc_ratio_mode",
}


def loss_recipe(loss_mode: str) -> str:
    """The recipe a verl ``policy_loss.loss_mode`` runs, as the recipe table names it:
    ``crlvr_<recipe>`` -> ``<recipe>``; verl's own losses (``vanilla``, ...) keep their
    name, which names no recipe (so they take a table's default for unlisted recipes)."""
    return loss_mode.removeprefix(LOSS_PREFIX)


def refuse_renamed(names: Iterable[str]) -> None:
    """Raise a one-line ``ValueError`` naming the new name of the first old (0.1.0) field
    name among ``names``: an old name would otherwise reach ``__init__`` as an unknown
    keyword (or, worse, be dropped by a merge)."""
    for name in names:
        if name in RENAMED:
            raise ValueError(
                f"{WHERE}{name} is 0.1.0's name: use {WHERE}{RENAMED[name]} (the TRL path's name)"
            )


@dataclass
class CrlvrPolicyLossConfig(
    PolicyLossConfig, AdvantageFields, ConSPOFields, RCCFields, BiCCFields, StalenessFields
):
    """verl's policy-loss config plus the contrastive-rlvr fields of the TRL path.

    Every field below has the TRL path's name, default, choices and check (the shared
    groups :class:`~contrastive_rlvr.method_options.AdvantageFields` (``adv_eps``,
    ``reward_threshold``), :class:`~contrastive_rlvr.method_options.ConSPOFields`
    (``conspo_tau``, ``conspo_max_margin``, ``conspo_warmup``),
    :class:`~contrastive_rlvr.method_options.RCCFields` (``rcc_coef``, ``rcc_delta``,
    ``rcc_bound``) and :class:`~contrastive_rlvr.method_options.BiCCFields` (``bicc``
    and the ``bicc_*`` fields), whose help texts say what each means). A name of 0.1.0
    (:data:`RENAMED`: ``tau``, ``max_margin``, ``margin_warmup``, ``threshold``,
    ``bicc_ratio``) is refused naming the new one. Where verl differs, and why:

    Attributes:
        bicc_form: ``"distill"`` runs as on the TRL path: the ``crlvr_sync`` trainer takes the
            teacher's log-probs on the conditioned rows (verl's old-log-prob pass for
            ``bicc_teacher: sampling``, the reference pass for ``reference``) and writes
            them to the batch; the actor's loss
            (:class:`~contrastive_rlvr.integrations.verl.distill.CrlvrActorLoss`) is
            ``(1 - bicc_distill_weight)`` x verl's loss on the plain rows + the weight x the
            distill term. ``bicc_ratio_mode`` stays unset (the loss reads the plain prompt).
        bicc_transfer_every, bicc_transfer_warn: the ``crlvr_sync`` trainer logs
            ``bicc/transfer_cos`` on probed steps (two more forward + backward passes on
            one micro-batch per rank, in the actor's workers) and warns as the TRL path.
        bicc_ratio_mode: unset (``None``), the recipe's default from the table both
            engines read (``algorithms.bicc_defaults.default_bicc_ratio_mode``, the
            recipe of ``loss_mode`` by :func:`loss_recipe`), resolved here once so
            that driver and workers see one mode (verl's configs are frozen after
            ``__init__``). ConSPO's loss reads no old log-probs, so under it ``paper`` and
            ``consistent`` are the same update and the ``crlvr_sync`` trainer skips the
            recomputation. ``"conditioned_old"`` (policy on the plain prompt, old log-probs
            on the conditioned one) is refused: verl's actor update reads both from the
            same rows, and this trainer builds no plain rows with conditioned old log-probs.
        bicc_mix: must stay 1.0: a plain-prompt share needs a second actor forward per
            micro-batch, which verl's loss call does not make (refused, not ignored).
        bicc_max_seq_len, bicc_context_ratio: unset, ``L`` is the batch's longest prompt +
            ``data.max_response_length`` (verl's name for ``max_completion_length``).
        bicc_placement: ``"auto"`` puts the attempts in the user turn of verl's chat
            prompts (``raw_prompt``), rendered again with the chat template and
            ``data.apply_chat_template_kwargs``.
        bicc_kl_reference: read with verl's KL loss on (``use_kl_loss`` and
            ``kl_loss_coef > 0``), TRL's ``beta > 0``.
        adv_eps: read by the ``crlvr_grpo`` / ``crlvr_rcc`` estimators (ConSPO's take none).
        stale_ratio, rcc_offpolicy, conspo_mixed_versions: the stale-rollout choices of
            :class:`~contrastive_rlvr.method_options.StalenessFields`, read by every
            ``crlvr_*`` trainer (:mod:`.staleness`); in ``crlvr_sync`` no row is stale.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> CrlvrPolicyLossConfig:
        # Hydra's instantiate passes the YAML's keys as keywords: an old name is refused
        # here, in one line, before the dataclass __init__ calls it an unexpected keyword.
        refuse_renamed(kwargs)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        # OmegaConf hands over YAML strings as they are: bicc: "false" would be true
        check_field_types(self, VERL_GROUPS, WHERE)
        self.check_advantage_fields(WHERE)
        self.check_conspo_fields(WHERE)
        self.check_rcc_fields(WHERE)
        self.check_bicc_fields(WHERE)
        self.check_staleness_fields(WHERE)
        if self.bicc_ratio_mode is None and not (self.bicc and self.bicc_form == "distill"):
            # Resolved once here so that every reader (driver and workers) sees one mode;
            # verl's configs are frozen after __init__.
            mode = default_bicc_ratio_mode(loss_recipe(self.loss_mode))
            object.__setattr__(self, "bicc_ratio_mode", mode)
        if self.bicc_ratio_mode == "conditioned_old":
            raise ValueError(
                f"{WHERE}bicc_ratio_mode='conditioned_old' is not supported on verl: its ratio "
                "takes the policy on the plain prompt and the old log-probs on the "
                "conditioned one, and verl's actor update reads both from the same rows; use "
                "'paper' or 'consistent' (or the TRL path)"
            )
        if self.bicc_mix != 1.0:
            raise ValueError(
                f"{WHERE}bicc_mix={self.bicc_mix} is not supported on verl: the plain-prompt "
                "share needs a second actor forward per micro-batch, which verl's policy-loss "
                "call does not make; use bicc_mix=1.0 (or the TRL path)"
            )
