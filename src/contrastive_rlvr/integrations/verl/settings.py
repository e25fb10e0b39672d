"""The start checks of the ``crlvr_*`` trainers: every combination their hooks cannot run
is refused, naming the setting, before Ray starts (:mod:`.launch`) and again before any
worker starts (docs/scale-out.md, "Refused at start"), and the rules the hooks and the
checks share (which passes BiCC recomputes, token limits).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from omegaconf import DictConfig
from verl.trainer.ppo.utils import need_reference_policy
from verl.utils.config import omega_conf_to_dataclass

from ...algorithms import context_budget
from ...method_options import check_choices, check_field_types, literal_fields
from .advantages import ESTIMATORS, EstimatorSpec
from .config import VERL_GROUPS, WHERE, CrlvrPolicyLossConfig, refuse_renamed
from .groups import check_conspo_layout
from .losses import PREFIX, is_contrastive_loss
from .modes import rollout_correction, trainer_name
from .stale_checks import check_staleness, recomputes_old_log_probs


def crlvr_options(config: DictConfig) -> CrlvrPolicyLossConfig:
    """The contrastive-rlvr hyperparameters of a verl config (defaults when not selected).

    A field name of 0.1.0 (``tau``, ``threshold``, ...) is refused here in one line naming
    the new one, before Hydra wraps the same error in its own."""
    section = config.actor_rollout_ref.actor.policy_loss
    if str(section.get("_target_", "")).endswith("CrlvrPolicyLossConfig"):
        refuse_renamed(section.keys())
        # before Hydra wraps the same error in its own lines: bicc: "false" is a string,
        # rcc_offpolicy: sometimes is no choice
        check_field_types(section, VERL_GROUPS, WHERE)
        for group in VERL_GROUPS:
            check_choices(_choices_view(section, group), group, WHERE)
    loss_cfg = omega_conf_to_dataclass(section)
    return loss_cfg if isinstance(loss_cfg, CrlvrPolicyLossConfig) else CrlvrPolicyLossConfig()


def _choices_view(section: Any, group: type) -> SimpleNamespace:
    """The ``Literal`` fields of ``group`` as the YAML section sets them (the group's default
    where it does not), for :func:`check_choices` before any dataclass is built."""
    defaults = {f.name: f.default for f in dataclasses.fields(group)}
    return SimpleNamespace(
        **{name: section.get(name, defaults[name]) for name in literal_fields(group)}
    )


def check_settings(config: DictConfig) -> CrlvrPolicyLossConfig:
    """Validate a verl config for a ``crlvr_*`` trainer; return our hyperparameters.

    Also the stale-rollout choices of :func:`.staleness.check_staleness`.

    Raises ``ValueError`` naming the setting when ConSPO's loss and estimator
    are not paired, when RCC has no reference policy, when ConSPO's micro-batches
    could split a group, when a rollout correction cannot be honoured
    (:func:`check_rollout_correction`), when ``use_prefix_grouper`` is set (inert
    here), when BiCC's consistent mode meets rollout bypass mode, or when a dynamic
    batch size's token limit cannot hold a conditioned row (:func:`check_bicc_token_limits`).
    """
    actor = config.actor_rollout_ref.actor
    loss_mode = actor.policy_loss.get("loss_mode", "vanilla")
    check_loss_mode(loss_mode)
    estimator = ESTIMATORS.get(config.algorithm.adv_estimator)
    is_target = str(actor.policy_loss.get("_target_", "")).endswith("CrlvrPolicyLossConfig")
    contrastive = estimator is not None and estimator.contrastive
    if is_contrastive_loss(loss_mode) != contrastive:
        raise ValueError(
            f"policy_loss.loss_mode={loss_mode!r} and algorithm.adv_estimator="
            f"{config.algorithm.adv_estimator!r} do not pair: ConSPO's loss needs "
            "the crlvr_conspo or crlvr_conspo_rcc estimator and vice versa"
        )
    if is_contrastive_loss(loss_mode) and not is_target:
        raise ValueError(
            f"{loss_mode} needs actor_rollout_ref.actor.policy_loss._target_="
            "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
        )
    if estimator is not None and estimator.needs_ref and not need_reference_policy(config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} needs the reference log-probs: set "
            "actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef may be 0)"
        )
    if estimator is not None and (estimator.needs_ref or contrastive):
        if config.algorithm.get("use_kl_in_reward", False):
            raise ValueError(
                f"algorithm.adv_estimator={estimator.name!r} does not support "
                "algorithm.use_kl_in_reward=True; use actor.use_kl_loss for the KL term"
            )
    checkrollout_correction(config, estimator, loss_mode)
    if contrastive:
        check_conspo_layout(
            group_size=int(config.actor_rollout_ref.rollout.n),
            shuffle=bool(actor.get("shuffle", False)),
            use_dynamic_bsz=bool(actor.get("use_dynamic_bsz", False)),
            micro_batch_size_per_gpu=actor.get("ppo_micro_batch_size_per_gpu"),
            mini_batch_size=int(actor.ppo_mini_batch_size),
        )
    if bool(actor.get("use_prefix_grouper", False)):
        # verl reads it in its legacy RayPPOTrainer only; the v1 engine workers ignore it.
        raise ValueError(
            "actor_rollout_ref.actor.use_prefix_grouper=True does nothing under "
            f"trainer.v1.trainer_mode={trainer_name(config)} (verl's v1 engine workers do not read "
            "it); set it to false (docs/scale-out.md)"
        )
    options = crlvr_options(config)
    if recomputes_old_log_probs(config, options):
        if rollout_correction(config).get("bypass_mode", False):
            raise ValueError(
                "policy_loss.bicc_ratio_mode='consistent' recomputes the old log-probs on the "
                "conditioned prompt; it cannot run with algorithm.rollout_correction.bypass_mode"
            )
    if options.bicc:
        check_bicc_token_limits(config, options)
        check_bicc_distill(config, options)
    check_staleness(config, options)
    return options


def check_bicc_distill(config: DictConfig, options: CrlvrPolicyLossConfig) -> None:
    """Refuse what ``bicc_form: distill`` cannot run with: a reference teacher without a
    reference model, and verl's own distillation (its loss would replace the one that
    carries BiCC's term)."""
    if options.bicc_form != "distill":
        return
    if options.bicc_teacher == "reference" and not need_reference_policy(config):
        raise ValueError(
            "policy_loss.bicc_teacher='reference' needs verl's reference model: set "
            "actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef may be 0)"
        )
    if bool((config.get("distillation", None) or {}).get("enabled", False)):
        raise ValueError(
            "policy_loss.bicc_form='distill' cannot run with verl's distillation.enabled=True "
            "(its loss replaces the actor loss that carries BiCC's term); set it to false"
        )


def check_loss_mode(loss_mode: object, registered: Any = None) -> None:
    """Refuse a ``crlvr_*`` loss mode no one registered (a typo such as ``crlvr_grop``),
    naming the closest registered one, at start rather than in a worker's first update.
    ``registered``: the names verl knows (default: its policy-loss registry)."""
    import difflib

    if registered is None:
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as registered
    name = str(loss_mode)
    if not name.startswith(PREFIX) or name in registered:
        return
    ours = sorted(n for n in registered if str(n).startswith(PREFIX))
    close = difflib.get_close_matches(name, ours, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(
        f"actor_rollout_ref.actor.policy_loss.loss_mode={name!r} is not a registered loss"
        f"{hint}; the contrastive-rlvr losses are: {', '.join(ours)}"
    )


def checkrollout_correction(config: DictConfig, estimator: EstimatorSpec | None, loss_mode: str):
    """Refuse the vLLM rollout corrections a ``crlvr_*`` estimator or loss cannot take.

    - IS weights / rejection sampling with an estimator ``crlvr_sync`` computes itself
      (RCC, ConSPO): it skips verl's correction step, so they would be dropped;
    - IS weights with a ``crlvr_*`` loss: the loss cannot apply them (it would raise in
      the worker at the first update);
    - bypass mode with RCC: old_log_probs become vLLM's rollout log-probs, so delta
      would be ``log pi_vllm - log pi_ref``, not the policy's shift.
    """
    correction = rollout_correction(config)
    own = estimator is not None and (estimator.needs_ref or estimator.contrastive)
    if own and (correction.get("rollout_is") or correction.get("rollout_rs")):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} does not support "
            "algorithm.rollout_correction.rollout_is / rollout_rs; set them to null"
        )
    if str(loss_mode).startswith(PREFIX) and correction.get("rollout_is"):
        raise ValueError(
            f"policy_loss.loss_mode={loss_mode!r} does not apply rollout-correction "
            "importance weights; set algorithm.rollout_correction.rollout_is=null (or use a "
            "verl built-in loss)"
        )
    if estimator is not None and estimator.needs_ref and correction.get("bypass_mode", False):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} takes RCC's delta = log pi_old - "
            "log pi_ref from old_log_probs; algorithm.rollout_correction.bypass_mode=True "
            "makes them vLLM's rollout log-probs, so delta would not be the policy's shift; "
            "set bypass_mode=false"
        )


def conditioned_reference(config: DictConfig, options: CrlvrPolicyLossConfig) -> bool:
    """Whether the KL term's reference is recomputed on the conditioned prompt:
    ``bicc_kl_reference='conditioned'`` with a KL loss, in every ratio mode, as the TRL
    path does with ``beta > 0``."""
    actor = config.actor_rollout_ref.actor
    return (
        options.bicc
        and options.bicc_form != "distill"  # the distill form's loss reads the plain prompt
        and options.bicc_kl_reference == "conditioned"
        and bool(actor.get("use_kl_loss", False))
        and float(actor.get("kl_loss_coef", 0.0)) > 0
    )


def bicc_token_limits(config: DictConfig, options: CrlvrPolicyLossConfig) -> dict[str, int]:
    """The token limits per micro-batch that conditioned rows pass through, by setting name:
    the actor update's with dynamic batch size, and in the consistent mode the old
    (and, with a conditioned reference, the reference) log-prob passes' (verl's
    ``max_token_len_per_gpu x ulysses_sequence_parallel_size``)."""
    arr = config.actor_rollout_ref
    sp = int(
        (arr.actor.get("fsdp_config", None) or {}).get("ulysses_sequence_parallel_size", None)
        or arr.actor.get("ulysses_sequence_parallel_size", 1)
        or 1
    )
    limits: dict[str, int] = {}
    distill = options.bicc_form == "distill"
    # The distill form's update reads the plain rows; only its teacher pass is conditioned.
    if arr.actor.get("use_dynamic_bsz", False) and not distill:
        limits["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] = (
            int(arr.actor.ppo_max_token_len_per_gpu) * sp
        )
    passes = []
    teacher = options.bicc_teacher if distill else None
    if recomputes_old_log_probs(config, options) or teacher == "sampling":
        passes.append(("rollout", arr.get("rollout", None)))
    if conditioned_reference(config, options) or teacher == "reference":
        passes.append(("ref", arr.get("ref", None)))
    for name, section in passes:
        if section is not None and section.get("log_prob_use_dynamic_bsz", False):
            key = f"actor_rollout_ref.{name}.log_prob_max_token_len_per_gpu"
            limits[key] = int(section.log_prob_max_token_len_per_gpu) * sp
    return limits


def longest_conditioned_row(config: DictConfig, options: CrlvrPolicyLossConfig) -> int:
    """Prompt + context + response tokens of the longest row BiCC can build: the
    longest prompt ``data.max_prompt_length`` with the largest context budget."""
    prompt, response = int(config.data.max_prompt_length), int(config.data.max_response_length)
    budget = context_budget(
        options.bicc_context_ratio,
        longest_prompt=prompt,
        max_completion_length=response,
        max_seq_len=options.bicc_max_seq_len,
    )
    return prompt + budget + response


def check_bicc_token_limits(config: DictConfig, options: CrlvrPolicyLossConfig) -> None:
    """Refuse a dynamic batch size whose token limit cannot hold a conditioned row (verl
    would assert ``max_token_len >= max_seq_len`` inside a worker, mid-run)."""
    longest = longest_conditioned_row(config, options)
    for key, limit in bicc_token_limits(config, options).items():
        if limit < longest:
            raise ValueError(
                f"{key} gives {limit} tokens per micro-batch, but a BiCC row can reach "
                f"{longest} (data.max_prompt_length + context budget + "
                "data.max_response_length); raise it to at least "
                f"{longest} or lower policy_loss.bicc_context_ratio / bicc_max_seq_len"
            )
