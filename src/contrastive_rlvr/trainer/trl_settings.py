"""Which loss a run uses, TRL's or this project's, and the TRL fields each recipe sets.

The recipes TRL already has run TRL's own ``GRPOTrainer._compute_loss`` on the inputs the
stages prepared (advantages, old / reference log-probs, BiCC's conditioned prompt ids), so
every loss-side feature of TRL (vLLM importance-sampling correction, ``tool_mask``, the
entropy bonus, the MoE router loss, ``top_entropy_quantile``, ``delta``, the off-policy
mask) keeps working. The table below is the mapping (docs/trl-parity.md):

=========  ===========  ===========================  ==================  ===============
recipe     loss_type    importance_sampling_level    epsilon, high       scale_rewards
=========  ===========  ===========================  ==================  ===============
grpo       grpo         token                        0.2, 0.2            group
dr_grpo    dr_grpo      token                        0.2, 0.2            none
dapo       dapo         token                        0.2, 0.28           group
gspo       grpo         sequence                     3e-4, 4e-4          group
=========  ===========  ===========================  ==================  ===============

TRL's ``loss_type`` aggregations equal the project's ``loss_agg`` modes (grpo:
seq-mean-token-mean, dapo: token-mean over the window, dr_grpo: token sums over
``max_completion_length``), and sequence-level importance sampling with ``loss_type='grpo'``
is GSPO's Eq. 5-7. GMPO (``GRPOTrainer`` has none; TRL's experimental ``GMPOTrainer`` gives
the same loss, docs/trl-parity.md, but applies no sampler correction), ConSPO, ReCo, OC-GRPO,
GSPO-token (VeriGate + GSPO), RCC's sampling reference (advantages at loss time) and BiCC
with ``bicc_mix < 1`` (two prompts per row) run the project's loss instead
(:mod:`.loss`), which honours ``tool_mask``, the MoE router loss, vLLM's importance-sampling
correction and ``off_policy_mask_threshold`` (as TRL applies them) and rejects the other
TRL loss options by name (:func:`check_project_loss_options`).

Every TRL loss field a user sets is honoured or rejected here, before any model loads:
``epsilon`` / ``epsilon_high`` are TRL's names for ``clip_low`` / ``clip_high``;
``loss_type`` for ``loss_agg``; ``scale_rewards`` replaces the recipe's std scaling.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..algorithms import Recipe, get_policy_loss, get_recipe, loss_option_names, token_method_loss
from ..algorithms.registry import RecipeFacts


@dataclass(frozen=True)
class TRLRoute:
    """The TRL settings a recipe maps onto."""

    loss_type: str
    importance_sampling_level: str


#: recipe name -> its TRL route, for the recipes whose ``trl_loss_type`` is set (registry.py).
TRL_ROUTES: RecipeFacts[TRLRoute] = RecipeFacts(
    lambda r: (
        TRLRoute(r.trl_loss_type, r.trl_importance_sampling_level) if r.trl_loss_type else None
    )
)
# TRL's loss types whose aggregation is one of the project's loss_agg modes.
LOSS_TYPE_AGG: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "dapo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}
SCALE_REWARDS = ("group", "none", "batch")


def project_loss_reason(cfg) -> str | None:
    """Why the run needs the project's loss (a phrase naming the setting), or None when
    TRL's ``_compute_loss`` runs."""
    if cfg.recipe not in TRL_ROUTES:
        return f"recipe={cfg.recipe!r} (TRL has no such loss)"
    for flag in ("reco", "oc_grpo"):
        if getattr(cfg, flag):
            return f"{flag}=True (its own loss)"
    if cfg.verigate and cfg.recipe == "gspo":
        return "verigate=True with recipe='gspo' (GSPO-token)"
    if cfg.bicc and cfg.bicc_mix < 1.0:
        return f"bicc_mix={cfg.bicc_mix} (a loss on two prompts per row)"
    if cfg.rcc and cfg.rcc_reference == "sampling":
        return "rcc_reference='sampling' (advantages taken at loss time)"
    return None


def uses_trl_loss(cfg) -> bool:
    """True when TRL's own ``_compute_loss`` computes the run's loss."""
    return project_loss_reason(cfg) is None


def _fail(field: str, value: object, fix: str) -> None:
    raise ValueError(f"{field}={value!r} is invalid: {fix}")


def _alias(cfg, trl_name: str, own_name: str) -> float | None:
    """One value from TRL's field and the project's (both set and different: an error)."""
    trl_value, own_value = getattr(cfg, trl_name), getattr(cfg, own_name)
    if trl_value is not None and own_value is not None and trl_value != own_value:
        _fail(
            trl_name,
            trl_value,
            f"it is TRL's name for {own_name}, which is set to {own_value!r}: set one of them",
        )
    return own_value if own_value is not None else trl_value


def resolve_clip(cfg) -> None:
    """``epsilon`` / ``epsilon_high`` (TRL) and ``clip_low`` / ``clip_high`` (project) are one
    setting each; both end up with the resolved value (the loss's paper default if unset).

    As in TRL, an ``epsilon`` without ``epsilon_high`` sets both bounds when the recipe's
    bounds are symmetric (GRPO, Dr.GRPO); DAPO's and GSPO's upper bound stays their own.
    Both names stay: TRL's users and TRL's loss read ``epsilon``, the project's recipes
    and configs ``clip_low``; dropping either would change what a user types."""
    if cfg.recipe == "conspo":
        for name in ("epsilon", "epsilon_high", "clip_low", "clip_high"):
            if getattr(cfg, name) is not None:
                _fail(name, getattr(cfg, name), "recipe='conspo' has no clipped ratio: unset it")
        return
    name, inherited = token_method_loss(
        cfg.recipe, verigate=cfg.verigate, reco=cfg.reco, oc_grpo=cfg.oc_grpo
    )
    defaults = {**get_policy_loss(name).defaults, **inherited}
    low, high = _alias(cfg, "epsilon", "clip_low"), _alias(cfg, "epsilon_high", "clip_high")
    symmetric = defaults.get("clip_low") == defaults.get("clip_high")
    if high is None and cfg.epsilon is not None and symmetric:
        high = cfg.epsilon
    low = defaults.get("clip_low") if low is None else low
    high = defaults.get("clip_high") if high is None else high
    cfg.clip_low = cfg.epsilon = low
    cfg.clip_high = cfg.epsilon_high = high


def resolve_loss_type(cfg) -> None:
    """``loss_type`` and ``importance_sampling_level``: TRL's loss honours any value; the
    project's loss takes the ``loss_type`` values that are one of its aggregations."""
    reason = project_loss_reason(cfg)
    agg, loss_type = cfg.loss_agg, cfg.loss_type
    if agg is not None and loss_type is not None and LOSS_TYPE_AGG.get(loss_type) != agg:
        _fail("loss_type", loss_type, f"it contradicts loss_agg={agg!r}: set one of them")
    if reason is None:
        route = TRL_ROUTES[cfg.recipe]
        if loss_type is None:
            loss_type = route.loss_type
            if agg is not None and "agg" in _loss_options(cfg):
                loss_type = next(k for k, v in LOSS_TYPE_AGG.items() if v == agg)
        cfg.loss_type = loss_type
        if cfg.importance_sampling_level is None:
            cfg.importance_sampling_level = route.importance_sampling_level
        return
    if loss_type is not None:
        if loss_type not in LOSS_TYPE_AGG or "agg" not in _loss_options(cfg):
            _fail(
                "loss_type",
                loss_type,
                f"TRL's loss does not run with {reason}: unset loss_type (the project's "
                "aggregation is loss_agg, for grpo, dapo and dr_grpo)",
            )
        cfg.loss_agg = LOSS_TYPE_AGG[loss_type]
    level = cfg.importance_sampling_level
    natural = "sequence" if cfg.recipe == "gspo" else "token"
    if level is not None and level != natural:
        _fail(
            "importance_sampling_level",
            level,
            f"TRL's loss does not run with {reason}, whose ratio is {natural}-level: unset it "
            "(recipe='gspo' is the sequence-level loss)",
        )


def _loss_options(cfg) -> set[str]:
    if get_recipe(cfg.recipe).loss is None:
        return set()
    name, _ = token_method_loss(
        cfg.recipe, verigate=cfg.verigate, reco=cfg.reco, oc_grpo=cfg.oc_grpo
    )
    return loss_option_names(name)


def resolve_scale_rewards(cfg) -> None:
    """``scale_rewards``: 'group' / 'none' set the recipe's std scaling (the project's
    advantages stage honours it); 'batch' and ``multi_objective_aggregation=
    'normalize_then_sum'`` keep TRL's own advantages, which only a run without RCC, dynamic
    sampling, OC-GRPO and VeriGate (the stages that recompute or merge them) can do."""
    recipe = get_recipe(cfg.recipe)
    value = {True: "group", False: "none"}.get(cfg.scale_rewards, cfg.scale_rewards)
    if value is None:
        value = "group" if recipe.scale_by_std else "none"
    if value not in SCALE_REWARDS:
        _fail("scale_rewards", value, f"choose one of {', '.join(SCALE_REWARDS)}")
    cfg.scale_rewards = value
    if keeps_trl_advantages(cfg):
        what = (
            f"scale_rewards={value!r}"
            if value == "batch"
            else "multi_objective_aggregation='normalize_then_sum'"
        )
        for flag in ("rcc", "dynamic_sampling", "oc_grpo", "verigate"):
            if getattr(cfg, flag):
                _fail(
                    flag,
                    True,
                    f"{what} keeps TRL's advantages, which {flag} recomputes: use "
                    "scale_rewards='group' or 'none' with multi_objective_aggregation="
                    "'sum_then_normalize'",
                )
        if recipe.objective != "policy":
            _fail("scale_rewards", value, f"recipe={cfg.recipe!r} has no advantages: unset it")


def keeps_trl_advantages(cfg) -> bool:
    """True when the advantages TRL computed stay (the project's stage does not run)."""
    return (
        cfg.scale_rewards == "batch"
        or getattr(cfg, "multi_objective_aggregation", None) == "normalize_then_sum"
    )


def effective_recipe(cfg) -> Recipe:
    """The recipe with the run's std scaling (``scale_rewards`` 'group' or 'none')."""
    recipe = get_recipe(cfg.recipe)
    if cfg.scale_rewards in ("group", "none"):
        return replace(recipe, scale_by_std=cfg.scale_rewards == "group")
    return recipe


def resolve_kl(cfg) -> None:
    """``beta`` with ConSPO (whose loss has no KL term) and TRL's ``use_bias_correction_kl``
    (the papers' KL, and the project's loss, have no importance weight on it: off unless
    set; the project's loss rejects it)."""
    if cfg.recipe == "conspo" and cfg.beta:
        _fail("beta", cfg.beta, "recipe='conspo' has no KL term: set beta=0")
    if cfg.use_bias_correction_kl is None:
        cfg.use_bias_correction_kl = False
    reason = project_loss_reason(cfg)
    if reason is not None and cfg.use_bias_correction_kl and cfg.beta:
        _fail(
            "use_bias_correction_kl",
            True,
            f"TRL's loss does not run with {reason}, whose KL is the plain k3: set it False",
        )


# TRL's loss-side options, with the value that leaves them off.
TRL_LOSS_OPTIONS_OFF: dict[str, object] = {
    "entropy_coef": 0.0,
    "use_adaptive_entropy": False,
    "top_entropy_quantile": 1.0,
    "delta": None,
}


def check_project_loss_options(cfg) -> None:
    """The project's loss honours ``tool_mask``, the MoE router loss, vLLM's
    importance-sampling correction and ``off_policy_mask_threshold``; TRL's other loss-side
    options are rejected by name when it runs."""
    reason = project_loss_reason(cfg)
    if reason is None:
        return
    for name, off in TRL_LOSS_OPTIONS_OFF.items():
        value = getattr(cfg, name, off)
        if value != off:
            _fail(
                name,
                value,
                f"it is an option of TRL's loss, which does not run with {reason}: "
                f"set {name}={off!r}",
            )
