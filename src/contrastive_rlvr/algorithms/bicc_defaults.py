"""The ratio mode each recipe takes when ``bicc_ratio_mode`` is left unset: one table
for both engines (the TRL path's ``bicc_ratio_mode``, verl's ``policy_loss.bicc_ratio_mode``).

Chosen from the measured step-1 clip fractions and results of docs/bicc.md ("Ratio mode
per recipe"): ``paper`` for every clipped policy recipe (it beat ``consistent`` on every
seed measured); ``consistent`` for ConSPO, whose loss has no ratio, so the mode only
decides which old log-probs exist (on TRL: no extra ``pi_old(o|q)`` forward). A recipe
that is not a registered recipe takes :data:`UNLISTED_RATIO_MODE`.
"""

from __future__ import annotations

from .registry import RECIPES, RecipeFacts

#: recipe name -> ratio mode, read from each recipe's ``bicc_ratio_mode`` (registry.py).
RECIPE_BICC_RATIO_MODE: RecipeFacts[str] = RecipeFacts(lambda recipe: recipe.bicc_ratio_mode)
#: The mode of a name that is no registered recipe (e.g. verl's own ``vanilla`` loss).
UNLISTED_RATIO_MODE = "paper"


def default_bicc_ratio_mode(recipe: str) -> str:
    """The ratio mode of ``recipe`` when the user sets none (the recipe table's)."""
    return RECIPES[recipe].bicc_ratio_mode if recipe in RECIPES else UNLISTED_RATIO_MODE
