"""The verl integration: our losses, advantage estimators and trainer inside verl 0.9.

verl imports :mod:`.plugin` through the ``verl.plugins`` entry point declared in
``pyproject.toml``; that module registers

- policy losses ``crlvr_grpo``, ``crlvr_dapo``, ``crlvr_dr_grpo``,
  ``crlvr_gspo``, ``crlvr_gspo_token``, ``crlvr_gmpo`` (the core's functions)
  and ``crlvr_conspo``, and ``crlvr_<recipe>`` for every recipe of the recipe table,
  one a user registers included (set ``actor_rollout_ref.actor.policy_loss.loss_mode``);
- advantage estimators ``crlvr_grpo``, ``crlvr_dr_grpo``, ``crlvr_rcc``,
  ``crlvr_dr_grpo_rcc``, ``crlvr_conspo``, ``crlvr_conspo_rcc``
  (set ``algorithm.adv_estimator``);
- the trainer ``crlvr_sync`` (set ``trainer.v1.trainer_mode``), which feeds the
  reference log-probs to the RCC estimators, rewrites the actor's sequences
  for BiCC and keeps ConSPO's groups whole.

The policy-loss config (:mod:`.config`) carries the TRL path's fields under their
names, inherited from the shared groups of :mod:`contrastive_rlvr.method_options`.
:mod:`.groups` holds the engine-free pieces (pure torch); the other modules
import verl. See docs/scale-out.md.
"""

try:
    # verl first: importing verl imports this plugin (its entry point), whose trainer
    # imports .settings; a module of this package imported before verl (``import
    # ...verl.settings``) would otherwise be half-initialised when that happens, and the
    # crlvr_sync trainer would not register ("circular import").
    import verl  # noqa: F401
except ImportError:  # the engine-free modules (.groups) work without verl
    pass
