"""Which recipes and switches the token-level methods VeriGate, ReCo and OC-GRPO combine with.

One table, one check, one place that picks the policy loss, so that the
trainer never chains ``if`` tests on method names.

- VeriGate (:mod:`.verigate`) yields token-level advantages (B, T): it needs a
  loss that takes them, so ``grpo``, ``dr_grpo`` and ``dapo`` as they are and
  ``gspo`` through ``gspo_token`` (equal to GSPO for per-row advantages); not
  ``gmpo`` (per-row advantages in a geometric mean) nor ``conspo`` (no
  advantages). DAPO's dynamic sampling removes every all-equal group, so the
  gate would never open: VeriGate needs it off.
- ReCo (:mod:`.reco`) replaces the token importance ratio: only the recipes
  whose loss is a token-ratio surrogate (``grpo``, ``dr_grpo``, ``dapo``); its
  loss takes their clip bounds and aggregation.
- OC-GRPO (:mod:`.ocgrpo`) puts a token importance weight on guided rows in
  the same token-ratio surrogate: the same three recipes.
- ReCo and OC-GRPO both replace the ratio of the same loss: not together.
- BiCC goes with VeriGate and ReCo (it changes only the inputs of the policy
  log-probs). It does not go with OC-GRPO: both redefine the context of the
  log-prob in the numerator and the old log-prob in the denominator of the
  ratio, and their combination is undefined in our reading.
- RCC goes with all three (it changes the outcome baseline; for VeriGate pass
  the RCC advantages as ``outcome``; for OC-GRPO compute ``delta`` of guided
  rows on the unguided prompt).
"""

from __future__ import annotations

from .losses import get_policy_loss, loss_option_names
from .registry import get_recipe

#: Recipes each token-level method works with.
TOKEN_METHOD_RECIPES: dict[str, tuple[str, ...]] = {
    "verigate": ("grpo", "dr_grpo", "dapo", "gspo"),
    "reco": ("grpo", "dr_grpo", "dapo"),
    "oc_grpo": ("grpo", "dr_grpo", "dapo"),
}
#: Pairs of switches that cannot be on together, with the reason.
TOKEN_METHOD_CONFLICTS: dict[frozenset[str], str] = {
    frozenset({"reco", "oc_grpo"}): "both replace the token importance ratio of the same loss",
    frozenset({"bicc", "oc_grpo"}): (
        "both redefine the contexts of the ratio (BiCC adds the opposite partition, "
        "OC-GRPO drops the hint); their combination is undefined"
    ),
}


def check_token_method_compat(
    recipe: str,
    *,
    verigate: bool = False,
    reco: bool = False,
    oc_grpo: bool = False,
    bicc: bool = False,
    rcc: bool = False,
    dynamic_sampling: bool | None = None,
) -> None:
    """Raise ``ValueError`` naming the conflict if the switches do not go together.

    Args:
        recipe: a registered recipe name.
        verigate, reco, oc_grpo, bicc, rcc: the switches.
        dynamic_sampling: DAPO's refill of all-equal groups; None = the
            recipe's default.
    """
    spec = get_recipe(recipe)
    on = {
        name
        for name, flag in (
            ("verigate", verigate),
            ("reco", reco),
            ("oc_grpo", oc_grpo),
            ("bicc", bicc),
            ("rcc", rcc),
        )
        if flag
    }
    for method, recipes in TOKEN_METHOD_RECIPES.items():
        if method in on and recipe not in recipes:
            raise ValueError(
                f"{method}=True does not work with recipe {recipe!r}; "
                f"it works with: {', '.join(recipes)}"
            )
    for pair, why in TOKEN_METHOD_CONFLICTS.items():
        if pair <= on:
            a, b = sorted(pair)
            raise ValueError(f"{a}=True and {b}=True cannot be combined: {why}")
    sampling = spec.dynamic_sampling if dynamic_sampling is None else dynamic_sampling
    if verigate and sampling:
        raise ValueError(
            f"verigate=True with dynamic sampling (recipe {recipe!r}): dynamic sampling drops "
            "every group whose rewards are all equal, so the gate never opens; "
            "turn dynamic sampling off"
        )


def token_method_loss(
    recipe: str, *, verigate: bool = False, reco: bool = False, oc_grpo: bool = False
) -> tuple[str, dict[str, object]]:
    """The policy loss to use and the recipe's options it inherits.

    Returns ``(name, options)``: ``"reco"`` or ``"oc_grpo"`` with the recipe
    loss's clip bounds and aggregation (e.g. DAPO's 0.2/0.28 and token-mean),
    ``"gspo_token"`` for GSPO with VeriGate, else the recipe's own loss with
    no extra options. Call :func:`check_token_method_compat` first.
    """
    base = get_recipe(recipe).loss
    if base is None:
        raise ValueError(f"recipe {recipe!r} has no policy loss")
    if reco or oc_grpo:
        name = "reco" if reco else "oc_grpo"
        accepted = loss_option_names(name)
        inherited = {k: v for k, v in get_policy_loss(base).defaults.items() if k in accepted}
        return name, inherited
    if verigate and base == "gspo":
        return "gspo_token", {}
    return base, {}
