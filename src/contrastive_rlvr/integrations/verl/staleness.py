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

from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from . import transfer
from .advantages import ESTIMATORS
from .config import WHERE
from .groups import group_rows
from .offpolicy import mixed_version_groups, row_staleness
from .stale_checks import stale_ratio


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
