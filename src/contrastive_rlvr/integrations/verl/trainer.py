"""The project's verl trainers: RCC, BiCC and whole ConSPO groups in verl's v1 modes.

Registered in verl's trainer registry; select one with ``trainer.v1.trainer_mode``:

==================== ============================ =========================================
name                 verl's trainer it extends    rollouts
==================== ============================ =========================================
crlvr_sync           ``PPOTrainerSync``           the weights being trained (k = 0)
crlvr_colocate_async ``PPOTrainerColocateAsync``  same GPUs, partial rollout, k >= 0
crlvr_separate_async ``PPOTrainerSeparateAsync``  own GPUs, ``parameter_sync_step``, k >= 0
==================== ============================ =========================================

Each is verl's trainer of that mode (its replay buffer, weight sync, checkpoints: the
``trainer_mode`` verl reads is the mode's own name) with these hooks overridden, each
doing one thing (the same hooks in every mode; verl's v1 modes call the same methods):

- ``__init__``: :func:`check_settings` refuses, naming the field, every
  combination the hooks cannot run, before any worker starts.
- ``_init_tokenizer``: verl's, also keeping the model's EOS list and window
  for BiCC's rows (what the TRL path reads from the model).
- ``_compute_advantage``: for the ``crlvr_*`` estimators that need more than
  rewards (RCC needs the reference log-probs, ConSPO the training progress for
  its margin), reads those fields and calls the registered estimator with
  them; every other estimator goes to verl's own path unchanged.
- ``_update_actor``: with ``policy_loss.bicc=True``, rewrites each row's
  prompt to its conditioned prompt, built by the TRL stage's
  :class:`~contrastive_rlvr.algorithms.bicc_rows.BiCCRowBuilder` (placement,
  chat rendering, budget, framing budget, pairing, template, EOS list),
  recomputes on it the old log-probs in the ``consistent`` ratio mode and,
  with a KL loss and ``bicc_kl_reference='conditioned'``, the reference ones,
  for the duration of the update, then puts the plain rows back. The old
  log-probs of the ``paper`` mode, the RCC delta and the logged metrics all
  see the plain prompt.
- ``_init_resource_pool_mgr``: with BiCC, the actor's worker is
  :class:`~.worker.CrlvrActorRolloutRefWorker` (verl's, with the distill term in its
  loss and the transfer probe ``bicc/transfer_cos``); in ``crlvr_separate_async``
  :class:`~.worker.CrlvrDetachActorWorker`, which keeps verl's weight save / restore
  (``separate_async`` computes the old log-probs with the weights of the start of its
  cycle, and BiCC's second old-log-prob pass goes through the same save / restore).
- ``_update_actor`` and ``_compute_advantage`` also apply the stale-rollout choices
  (:mod:`.staleness`: the ratio's denominator, RCC's importance weights, ConSPO's
  mixed-version groups) and log the stale share.
- ``_balance_batch``: with BiCC, balances on the conditioned lengths the
  update sees; with ConSPO, balances whole groups over the data-parallel
  ranks (verl balances rows, which splits groups), after checking the settings
  that keep every micro-batch made of whole groups.

Not supported with these features: multi-modal rows (BiCC rebuilds 1-D
position ids), multi-output agent loops (one row per session), rewards with
an in-reward KL penalty (``algorithm.use_kl_in_reward``) for the RCC/ConSPO
estimators, rollout-correction weights with the ``crlvr_*`` losses,
``bicc_mix < 1`` (docs/scale-out.md, "Refused at start").

``bicc_form: distill``: ``_update_actor`` takes the teacher's log-probs on the conditioned
rows (no gradient), puts the plain rows back and trains on them with the distill term
(:mod:`.distill`); on probed steps both forms measure ``bicc/transfer_cos`` first.

One module per concern: the start checks in :mod:`.settings` (run before Ray starts by
:mod:`.launch`), the stale-rollout choices in :mod:`.staleness`, the advantage hook in
:mod:`.advantage_hooks`, the BiCC hooks in :mod:`.bicc_hooks`, the balancing in
:mod:`.group_balance` (mixins before ``PPOTrainerSync``), TransferQueue reads and writes
in :mod:`.transfer`.
"""

from __future__ import annotations

from typing import ClassVar

import ray
from omegaconf import DictConfig
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from .advantage_hooks import AdvantageHooks
from .bicc_hooks import BiCCHooks
from .group_balance import GroupBalance
from .modes import TRAINER_MODES, TRAINER_NAME
from .settings import check_settings
from .staleness import StalenessHooks
from .worker import CrlvrActorRolloutRefWorker, CrlvrDetachActorWorker

__all__ = [
    "TRAINER_NAME",
    "CrlvrColocateAsyncTrainer",
    "CrlvrSeparateAsyncTrainer",
    "CrlvrTrainer",
    "check_settings",
]


class CrlvrHooks(AdvantageHooks, BiCCHooks, StalenessHooks, GroupBalance):
    """What every ``crlvr_*`` trainer adds to verl's trainer of its mode (module
    docstring); a subclass names its registry name and verl's mode."""

    #: The registry name (``trainer.v1.trainer_mode``) and verl's own mode it runs in.
    name: ClassVar[str]
    verl_mode: ClassVar[str]
    #: The BiCC actor worker for this mode.
    bicc_worker: ClassVar[type] = CrlvrActorRolloutRefWorker

    def __init__(self, config: DictConfig) -> None:
        self.crlvr = check_settings(config)
        super().__init__(config)

    def _init_resource_pool_mgr(self) -> None:
        """verl's, with BiCC's actor worker (:attr:`bicc_worker`: the distill term in the
        actor loss, the transfer probe) where verl puts its actor worker."""
        super()._init_resource_pool_mgr()
        if not self.crlvr.bicc:
            return
        for role in (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(self.bicc_worker)

    @property
    def trainer_mode(self) -> str:
        """verl's own mode name: verl compares it with ``"sync"`` to pick the replay buffer,
        refill and checkpoint behaviour, and reads ``trainer.v1.<mode>`` (warm-up batches,
        ``parameter_sync_step``) under it."""
        return self.verl_mode

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        # PPOTrainer.__init__ assigns config.trainer.v1.trainer_mode, the registry name.
        if value not in (self.name, self.verl_mode):
            raise ValueError(f"{type(self).__name__} is the {self.name!r} trainer, not {value!r}")


@register_trainer(TRAINER_NAME)
class CrlvrTrainer(CrlvrHooks, PPOTrainerSync):
    """verl's sync trainer plus RCC inputs, BiCC rewriting and group-preserving balance."""

    name, verl_mode = TRAINER_NAME, TRAINER_MODES[TRAINER_NAME]


@register_trainer("crlvr_colocate_async")
class CrlvrColocateAsyncTrainer(CrlvrHooks, PPOTrainerColocateAsync):
    """verl's colocated asynchronous trainer (partial rollout on the training GPUs, rollouts
    up to ``trainer.v1.sampler.max_off_policy_threshold`` versions old) with the hooks."""

    name = "crlvr_colocate_async"
    verl_mode = TRAINER_MODES[name]


@register_trainer("crlvr_separate_async")
class CrlvrSeparateAsyncTrainer(CrlvrHooks, PPOTrainerSeparateAsync):
    """verl's separate asynchronous trainer (a standalone rollout pool, weights pushed every
    ``parameter_sync_step`` mini-batches) with the hooks; BiCC's worker keeps verl's
    weight save / restore."""

    name = "crlvr_separate_async"
    verl_mode = TRAINER_MODES[name]
    bicc_worker = CrlvrDetachActorWorker
