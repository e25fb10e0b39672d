"""The stale-rollout start checks of the ``crlvr_*`` trainers (docs/algorithms.md, "Stale
rollouts"; the hooks that apply the choices are in :mod:`.staleness`), the
``crlvr_separate_async`` layout verl asserts, and the rule both read on which passes BiCC
recomputes. :func:`.settings.check_settings` calls :func:`check_staleness`.
"""

from __future__ import annotations

from omegaconf import DictConfig

from .advantages import ESTIMATORS
from .config import WHERE, CrlvrPolicyLossConfig
from .losses import is_contrastive_loss
from .modes import ASYNC_TRAINERS, is_async, rollout_correction


def recomputes_old_log_probs(config: DictConfig, options: CrlvrPolicyLossConfig) -> bool:
    """Whether the actor update recomputes the old log-probs on the conditioned prompt:
    BiCC's ``consistent`` ratio mode, except under ConSPO's loss, which reads no old
    log-probs (no ratio; the same update in either mode, without the extra pass)."""
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    return (
        options.bicc
        and options.bicc_ratio_mode == "consistent"
        and not is_contrastive_loss(loss_mode)
    )


SAMPLER_LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs"


def stale_ratio(config: DictConfig, options: CrlvrPolicyLossConfig) -> str | None:
    """The run's ratio denominator, ``"sampler"`` or ``"proximal"``; ``None`` where the loss
    reads no old log-probs (ConSPO's). Unset: ``sampler`` in an asynchronous mode,
    ``proximal`` in ``crlvr_sync`` (no stale rows: the two are one policy)."""
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    if is_contrastive_loss(loss_mode):
        return None
    if options.stale_ratio is not None:
        return options.stale_ratio
    return "sampler" if is_async(config) else "proximal"


def check_separate_layout(config: DictConfig) -> None:
    """``crlvr_separate_async``: what verl's ``PPOTrainerSeparateAsync`` asserts in its
    ``__init__`` (inside Ray's task runner), refused here in one line before Ray starts."""
    if str(config.trainer.v1.get("trainer_mode", "")) != "crlvr_separate_async":
        return
    sync_steps = int(config.trainer.v1.separate_async.parameter_sync_step)
    mini, batch = (
        int(config.actor_rollout_ref.actor.ppo_mini_batch_size),
        int(config.data.train_batch_size),
    )
    if batch != sync_steps * mini:
        raise ValueError(
            f"data.train_batch_size={batch} must equal trainer.v1.separate_async."
            f"parameter_sync_step={sync_steps} x actor_rollout_ref.actor.ppo_mini_batch_size="
            f"{mini} in trainer.v1.trainer_mode=crlvr_separate_async"
        )
    rollout = config.actor_rollout_ref.rollout
    for key in ("nnodes", "n_gpus_per_node"):
        if int(rollout.get(key, 0) or 0) <= 0:
            raise ValueError(
                f"crlvr_separate_async generates on its own pool: set "
                f"actor_rollout_ref.rollout.{key} > 0"
            )
    if str(rollout.checkpoint_engine.backend) == "naive":
        raise ValueError(
            "crlvr_separate_async pushes weights to a pool of its own: set "
            "actor_rollout_ref.rollout.checkpoint_engine.backend (nccl, nixl, ...), not naive"
        )


def check_staleness(config: DictConfig, options: CrlvrPolicyLossConfig) -> None:
    """Refuse, naming the setting, a stale-rollout choice the run cannot honour (and a
    ``crlvr_separate_async`` layout verl would assert on, :func:`check_separate_layout`)."""
    check_separate_layout(config)
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    has_sampler = bool(config.actor_rollout_ref.rollout.get("calculate_log_probs", False))
    if options.stale_ratio is not None and is_contrastive_loss(loss_mode):
        raise ValueError(
            f"{WHERE}stale_ratio={options.stale_ratio!r} has nothing to set: {loss_mode} reads "
            "no old log-probs (no ratio); leave it unset"
        )
    ratio = stale_ratio(config, options)
    if ratio == "sampler":
        if not has_sampler:
            raise ValueError(
                f"{WHERE}stale_ratio='sampler' (the default in {', '.join(ASYNC_TRAINERS)}) "
                f"reads the rollout's own log-probs: set {SAMPLER_LOG_PROBS}=true, or "
                "stale_ratio=proximal"
            )
        if recomputes_old_log_probs(config, options):
            raise ValueError(
                f"{WHERE}bicc_ratio_mode='consistent' takes the ratio's denominator on the "
                "conditioned prompt, which the sampler never saw: set stale_ratio=proximal "
                "(recomputed there by the trainer's weights) or bicc_ratio_mode=paper"
            )
    if ratio == "proximal" and rollout_correction(config).get("bypass_mode", False):
        raise ValueError(
            f"{WHERE}stale_ratio='proximal' recomputes the old log-probs; "
            "algorithm.rollout_correction.bypass_mode=True replaces them with the rollout's: "
            "set one of them otherwise"
        )
    estimator = ESTIMATORS.get(config.algorithm.adv_estimator)
    rcc = estimator is not None and estimator.needs_ref
    conspo = estimator is not None and estimator.contrastive
    # a choice set away from its default for a method the run does not use would do nothing
    if options.rcc_offpolicy != "importance_weighted" and not rcc:
        raise ValueError(
            f"{WHERE}rcc_offpolicy={options.rcc_offpolicy!r} has nothing to act on: "
            f"algorithm.adv_estimator={config.algorithm.adv_estimator!r} is no RCC estimator"
        )
    if options.conspo_mixed_versions != "allow" and not conspo:
        raise ValueError(
            f"{WHERE}conspo_mixed_versions={options.conspo_mixed_versions!r} has nothing to "
            f"act on: algorithm.adv_estimator={config.algorithm.adv_estimator!r} is not ConSPO's"
        )
    if not rcc or not is_async(config):
        return
    if options.rcc_offpolicy == "refuse":
        raise ValueError(
            f"{WHERE}rcc_offpolicy='refuse': algorithm.adv_estimator="
            f"{estimator.name!r} does not run in trainer.v1.trainer_mode="
            f"{config.trainer.v1.trainer_mode}; use crlvr_sync, or rcc_offpolicy="
            "importance_weighted / as_sampled"
        )
    if options.rcc_offpolicy == "importance_weighted" and not has_sampler:
        raise ValueError(
            f"{WHERE}rcc_offpolicy='importance_weighted' weighs stale rows by "
            f"pi_proximal / pi_sampler: set {SAMPLER_LOG_PROBS}=true, or rcc_offpolicy="
            "as_sampled"
        )
