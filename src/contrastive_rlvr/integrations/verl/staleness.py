"""Stale rollouts in the ``crlvr_*`` trainers: the choices of
:class:`~contrastive_rlvr.method_options.StalenessFields`, checked at start and applied
each step (docs/algorithms.md, "Stale rollouts").

- ``stale_ratio``: the update's ratio denominator. ``proximal`` is verl's: ``old_log_probs``
  recomputed by the trainer's weights at the start of the step (``separate_async``: at
  the start of its ``parameter_sync_step`` cycle). ``sampler`` puts the rollout's own
  log-probs (``rollout_log_probs``, the policy that drew the tokens, k versions old) in
  ``old_log_probs`` for the update only: RCC's delta and the logged entropy keep the
  proximal ones. Under BiCC's ``paper`` ratio the ratio is
  ``pi_theta(o | [q ; O]) / mu(o | q)``; the ``consistent`` mode, whose denominator is on
  the conditioned prompt the sampler never saw, is refused with ``sampler``.
- ``rcc_offpolicy``: RCC's delta stays ``log pi_proximal - log pi_ref``; its group mean and
  covariance are importance-weighted over stale rows (:mod:`.offpolicy`), taken as sampled,
  or an asynchronous mode with RCC is refused.
- ``conspo_mixed_versions``: ConSPO reads no old log-probs (its scores are the current
  policy's), so ``allow`` keeps a group that mixes versions; ``refuse`` stops the step.

Every step logs ``crlvr/staleness/stale_frac`` (rows older than the current version) and
``crlvr/staleness/mixed_version_groups`` (share of groups spanning several versions), next
to verl's own ``training/off_policy/trajectory_staleness/*``.
"""

from __future__ import annotations

from omegaconf import DictConfig
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from . import transfer
from .advantages import ESTIMATORS
from .config import WHERE, CrlvrPolicyLossConfig
from .groups import group_rows
from .losses import is_contrastive_loss
from .offpolicy import mixed_version_groups, row_staleness
from .settings import ASYNC_TRAINERS, _rollout_correction, is_async, recomputes_old_log_probs

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
    if ratio == "proximal" and _rollout_correction(config).get("bypass_mode", False):
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


class StalenessHooks:
    """The stale-rollout hooks of the ``crlvr_*`` trainers (a mixin after
    :class:`~.bicc_hooks.BiCCHooks`, so that its ``_update_actor`` swaps the denominator
    on the rows BiCC hands to verl's update). Reads ``config``, ``crlvr``,
    ``global_steps``."""

    def _stale_ratio(self) -> str | None:
        return stale_ratio(self.config, self.crlvr)

    def _stale_rows(self, batch: KVBatchMeta):
        """(B,) bool: rows older than the weights being trained."""
        return row_staleness(batch.tags, int(self.global_steps)) > 0

    def _check_versions(self, batch: KVBatchMeta, index: list[str], metrics: dict) -> None:
        """Log the stale share and the groups that mix versions; with ConSPO and
        ``conspo_mixed_versions: refuse``, stop at the first such group."""
        stale = self._stale_rows(batch)
        metrics["crlvr/staleness/stale_frac"] = stale.float().mean().item()
        mixed = mixed_version_groups(index, batch.tags, int(self.global_steps))
        groups = max(sum(len(r) > 1 for r in group_rows(index)), 1)
        metrics["crlvr/staleness/mixed_version_groups"] = len(mixed) / groups
        spec = ESTIMATORS.get(self.config.algorithm.adv_estimator)
        contrastive = spec is not None and spec.contrastive
        if mixed and contrastive and self.crlvr.conspo_mixed_versions == "refuse":
            raise ValueError(
                f"group {mixed[0]!r} mixes weight versions ({len(mixed)} of {groups} groups at "
                f"step {self.global_steps}) and {WHERE}conspo_mixed_versions='refuse'; set it "
                "to 'allow' or run trainer.v1.trainer_mode=crlvr_sync"
            )

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        if self._stale_ratio() != "sampler":
            return super()._update_actor(batch, metrics)
        # The update's denominator is the sampler's; the proximal log-probs come back after
        # it (the step's other readers, e.g. the metrics, see verl's own fields).
        saved = transfer.fetch(batch, ["old_log_probs"])
        sampler = transfer.fetch(batch, ["rollout_log_probs"])["rollout_log_probs"]
        swapped = transfer.put(
            batch,
            fields=TensorDict({"old_log_probs": sampler}, batch_size=len(batch)),
            tags=batch.tags,
        )
        try:
            super()._update_actor(swapped, metrics)
        finally:
            restored = transfer.put(batch, fields=saved, tags=batch.tags)
        return restored
