"""Our policy losses behind verl's policy-loss registry (``crlvr_<name>``).

verl calls a policy loss as ``fn(old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config, rollout_is_weights)`` once per
micro-batch and sums the micro-batch losses, normalising by the global
mini-batch through ``config.global_batch_info``. The adapters translate that
call into the core's ``policy_loss(name, logp, old_logp, advantages, mask,
...)``; the math stays in :mod:`contrastive_rlvr.algorithms`.

Which verl setting maps to which option:

- ``actor.clip_ratio_low`` / ``clip_ratio_high`` -> ``clip_low`` / ``clip_high``
  (verl's defaults are 0.2/0.2: set GSPO's 3e-4/4e-4, DAPO's 0.2/0.28, GMPO's 0.4/0.4);
- ``actor.loss_agg_mode`` -> ``agg`` of the token-level losses (grpo, dapo,
  dr_grpo); set the paper's mode, verl's default is ``token-mean``. GSPO and
  GMPO are sequence-level by definition and ignore it;
- ``global_batch_info``: ``global_batch_size / dp_size`` -> ``num_rows``,
  ``batch_num_tokens / dp_size`` -> ``num_tokens``, ``loss_scale_factor`` ->
  ``max_len`` (so summing micro-batches gives the full-batch value); ConSPO's
  divisor is the rank's share of the window's usable groups, from the same info
  and the scale its estimator puts in the targets;
- the KL term stays verl's (``actor.use_kl_loss``, ``kl_loss_coef``,
  ``kl_loss_type=low_var_kl`` is the k3 estimator, clamped to [-10, 10]);
- verl's dual clip (``clip_ratio_c``) is not applied; rollout-correction
  importance weights are refused.

Metrics come back as floats under ``crlvr/<core key>`` (e.g. ``crlvr/clip/frac``).
"""

from __future__ import annotations

from typing import Any

from verl.trainer.ppo import core_algos

from ...algorithms import (
    RECIPES,
    Recipe,
    conspo_loss,
    get_policy_loss,
    loss_option_names,
    policy_loss,
)
from ...algorithms.ops import Tensor, masked_mean
from ...algorithms.registry import on_recipe_registered
from .config import LOSS_PREFIX, CrlvrPolicyLossConfig, loss_recipe
from .groups import decode_conspo_targets

PREFIX = LOSS_PREFIX
CONSPO_LOSS = PREFIX + "conspo"
# The core losses whose inputs verl's loss call provides (log-probs, old log-probs,
# advantages, mask). Losses needing more per-row inputs are left out until a
# trainer hook supplies them. Every recipe of the recipe table is registered too, as
# ``crlvr_<recipe>`` (its loss; ConSPO's for a contrastive recipe).
CORE_LOSSES = ("grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "gmpo")


def is_contrastive_loss(loss_mode: str) -> bool:
    """Whether ``loss_mode`` is ConSPO's loss: ``crlvr_conspo`` or ``crlvr_<recipe>`` of a
    registered contrastive recipe (which needs a ``crlvr_conspo*`` estimator)."""
    recipe = RECIPES.get(loss_recipe(str(loss_mode))) if str(loss_mode).startswith(PREFIX) else None
    return loss_mode == CONSPO_LOSS or (recipe is not None and recipe.objective == "contrastive")


def _normalisers(config: Any) -> dict[str, float]:
    """The core's ``num_rows`` / ``num_tokens`` / ``max_len`` from verl's global batch info.

    verl scales each rank's loss by ``dp_size`` and the gradient all-reduce
    averages over ranks, so the per-rank normaliser is the global count / dp_size.
    """
    info = dict(config.get("global_batch_info") or {})
    dp = info.get("dp_size") or 1
    out: dict[str, float] = {}
    if info.get("global_batch_size") is not None:
        out["num_rows"] = float(info["global_batch_size"]) / dp
    if info.get("batch_num_tokens") is not None:
        out["num_tokens"] = float(info["batch_num_tokens"]) / dp
    if info.get("loss_scale_factor") is not None:
        out["max_len"] = info["loss_scale_factor"]
    return out


def _refuse_is_weights(name: str, rollout_is_weights: Tensor | None) -> None:
    if rollout_is_weights is not None:
        raise ValueError(
            f"policy loss {name!r} does not apply rollout-correction importance weights; "
            "unset algorithm.rollout_correction (or use a verl built-in loss)"
        )


def _metrics(core_metrics: dict[str, Tensor]) -> dict[str, float]:
    return {f"crlvr/{k}": float(v) for k, v in core_metrics.items()}


class CoreLossAdapter:
    """verl policy-loss callable running the core loss ``name``.

    Per-row losses (GSPO, GMPO) get the per-row advantage as the masked mean
    of verl's token-level advantages, which outcome estimators make constant
    along each row.
    """

    def __init__(self, name: str, registered_as: str | None = None) -> None:
        self.spec = get_policy_loss(name)
        self.name = registered_as or PREFIX + name
        self.accepted = loss_option_names(name)

    def __call__(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        if config is None:
            raise ValueError(f"policy loss {self.name!r} needs verl's actor config")
        _refuse_is_weights(self.name, rollout_is_weights)
        mask = response_mask.to(log_prob.dtype)
        low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
        high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
        options: dict[str, object] = {"clip_low": low, "clip_high": high, "agg": loss_agg_mode}
        options.update(_normalisers(config))
        options = {k: v for k, v in options.items() if k in self.accepted}
        if self.spec.per_row_advantages_only:
            advantages = masked_mean(advantages, mask, dim=1)  # (B,)
        loss, metrics = policy_loss(
            self.spec.name, log_prob, old_log_prob, advantages, mask, **options
        )
        return loss, _metrics(metrics)


def conspo_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """ConSPO (arXiv:2605.12969) as a verl policy loss.

    Labels, the step's margin and the window's scale come in ``advantages`` from a
    ``crlvr_conspo*`` estimator (:func:`.groups.decode_conspo_targets`); ``conspo_tau``
    from :class:`.config.CrlvrPolicyLossConfig`; the group size is
    ``config.rollout_n`` and the micro-batch must hold whole groups in order
    (the ``crlvr_sync`` trainer checks the settings). ``old_log_prob`` and
    ``loss_agg_mode`` are not used: ConSPO scores length-normalised log-probs,
    without a ratio.

    Normaliser, window-wide as on the TRL path: the micro-batch's sum of ``-J(q)``
    over its usable groups is divided by this rank's share of the window's usable
    groups, ``rows / (G * c)``, where ``rows`` is the rank's share of the mini-batch
    (``global_batch_size / dp_size`` from verl's global batch info, which verl's
    engine always sets; a direct call without it is taken as the whole mini-batch)
    and ``c`` the batch's groups per usable group, carried in
    the targets (:func:`.groups.conspo_window_scale`). verl sums the micro-batch
    losses and averages the ranks' gradients, so an optimizer step's gradient is the
    sum over the mini-batch's usable groups divided by the window's usable groups x
    the mini-batch's share of the batch: the paper's mean over usable groups when
    one mini-batch takes the whole batch, and the same for any micro-batch split and
    number of ranks.
    """
    _refuse_is_weights(CONSPO_LOSS, rollout_is_weights)
    if config is None or not isinstance(config.policy_loss, CrlvrPolicyLossConfig):
        raise ValueError(
            f"policy loss {CONSPO_LOSS!r} needs actor_rollout_ref.actor.policy_loss._target_="
            "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
        )
    mask = response_mask.to(log_prob.dtype)
    group_size = int(config.rollout_n)
    positive, margin, scale = decode_conspo_targets(advantages, mask)
    info = dict(config.get("global_batch_info") or {})
    rows = float(log_prob.shape[0])
    if info.get("global_batch_size") is not None:
        rows = float(info["global_batch_size"]) / (info.get("dp_size") or 1)
    loss, metrics = conspo_loss(
        log_prob,
        mask,
        positive.to(log_prob.dtype),
        group_size,
        tau=config.policy_loss.conspo_tau,
        margin=margin,
        threshold=0.5,
        num_groups=rows / (group_size * scale),
    )
    out = _metrics(metrics)
    out["crlvr/conspo/margin"] = margin
    return loss, out


def register_recipe_loss(recipe: Recipe) -> str:
    """Register ``crlvr_<recipe>`` with verl: the recipe's policy loss, or ConSPO's loss for
    a contrastive recipe; return the name. A recipe a user registers (before or after
    ``import verl``) runs as ``loss_mode: crlvr_<its name>``, and takes its own
    ``bicc_ratio_mode`` default, without another table to edit."""
    name = PREFIX + recipe.name
    if recipe.objective == "contrastive":
        core_algos.register_policy_loss(name)(conspo_policy_loss)
    else:
        core_algos.register_policy_loss(name)(CoreLossAdapter(recipe.loss or "", name))
    return name


def register_policy_losses() -> list[str]:
    """Register ``crlvr_<name>`` for each of :data:`CORE_LOSSES`, ``crlvr_conspo`` and
    ``crlvr_<recipe>`` for every recipe of the recipe table, now and as recipes are
    registered later (:func:`~contrastive_rlvr.algorithms.registry.on_recipe_registered`).

    verl's registry overwrites on a second registration, so calling this
    again (a second ``import verl`` in one process) is harmless.
    """
    names = []
    for name in CORE_LOSSES:
        adapter = CoreLossAdapter(name)
        core_algos.register_policy_loss(adapter.name)(adapter)
        names.append(adapter.name)
    core_algos.register_policy_loss(CONSPO_LOSS)(conspo_policy_loss)
    names.append(CONSPO_LOSS)
    on_recipe_registered(register_recipe_loss)
    return list(dict.fromkeys([*names, *(PREFIX + recipe for recipe in RECIPES)]))
