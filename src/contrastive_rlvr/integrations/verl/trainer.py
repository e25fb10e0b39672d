"""``crlvr_sync``: verl's synchronous v1 trainer with RCC, BiCC and whole ConSPO groups.

Registered in verl's trainer registry; select it with
``trainer.v1.trainer_mode=crlvr_sync``. It is verl's ``sync`` trainer
(``PPOTrainerSync``) with these hooks overridden, each doing one thing:

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
  loss and the transfer probe ``bicc/transfer_cos``).
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

One module per concern: the start checks in :mod:`.settings`, the advantage hook in
:mod:`.advantage_hooks`, the BiCC hooks in :mod:`.bicc_hooks`, the balancing in
:mod:`.group_balance` (mixins before ``PPOTrainerSync``), TransferQueue reads and writes
in :mod:`.transfer`.
"""

from __future__ import annotations

import ray
from omegaconf import DictConfig
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from .advantage_hooks import AdvantageHooks
from .bicc_hooks import BiCCHooks
from .group_balance import GroupBalance
from .settings import TRAINER_NAME, check_settings
from .worker import CrlvrActorRolloutRefWorker

__all__ = ["TRAINER_NAME", "CrlvrTrainer", "check_settings"]


@register_trainer(TRAINER_NAME)
class CrlvrTrainer(AdvantageHooks, BiCCHooks, GroupBalance, PPOTrainerSync):
    """verl's sync trainer plus RCC inputs, BiCC rewriting and group-preserving balance.

    Overrides ``__init__`` (validation) and ``trainer_mode`` here, and through its mixins
    ``_compute_advantage``, ``_init_tokenizer``, ``_update_actor`` and ``_balance_batch``
    (see the module docstring).
    """

    def __init__(self, config: DictConfig) -> None:
        self.crlvr = check_settings(config)
        super().__init__(config)

    def _init_resource_pool_mgr(self) -> None:
        """verl's, with BiCC's actor worker
        (:class:`~.worker.CrlvrActorRolloutRefWorker`: the distill term in the actor loss,
        the transfer probe) where verl puts its ``ActorRolloutRefWorker`` for the actor."""
        super()._init_resource_pool_mgr()
        if not self.crlvr.bicc:
            return
        for role in (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(CrlvrActorRolloutRefWorker)

    @property
    def trainer_mode(self) -> str:
        """verl compares the mode with ``"sync"`` to pick the replay buffer, refill and
        checkpoint behaviour; this trainer is the sync one under another registry name."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        # PPOTrainer.__init__ assigns config.trainer.v1.trainer_mode, the registry name.
        if value not in (TRAINER_NAME, "sync"):
            raise ValueError(
                f"{type(self).__name__} is the {TRAINER_NAME!r} trainer, not {value!r}"
            )
