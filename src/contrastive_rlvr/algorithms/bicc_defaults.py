"""The ratio mode each recipe takes when ``bicc_ratio_mode`` is left unset: one table
for both engines (the TRL path's ``bicc_ratio_mode``, verl's ``policy_loss.bicc_ratio``).

Chosen from the measured step-1 clip fractions and results of docs/bicc.md ("Ratio mode
per recipe"): ``paper`` for every clipped policy recipe (it beat ``consistent`` on every
seed measured); ``consistent`` for ConSPO, whose loss has no ratio, so the mode only
decides which old log-probs exist (on TRL: no extra ``pi_old(o|q)`` forward). A recipe
not listed (one a user registers) takes :data:`UNLISTED_RATIO_MODE`.
"""

from __future__ import annotations

#: recipe name (:data:`~contrastive_rlvr.algorithms.registry.RECIPES`) -> ratio mode.
RECIPE_BICC_RATIO_MODE: dict[str, str] = {
    "grpo": "paper",
    "dr_grpo": "paper",
    "dapo": "paper",
    "gmpo": "paper",
    "gspo": "paper",
    "conspo": "consistent",
}
#: The mode of a recipe missing from :data:`RECIPE_BICC_RATIO_MODE`.
UNLISTED_RATIO_MODE = "paper"


def default_bicc_ratio_mode(recipe: str) -> str:
    """The ratio mode of ``recipe`` when the user sets none (:data:`RECIPE_BICC_RATIO_MODE`)."""
    return RECIPE_BICC_RATIO_MODE.get(recipe, UNLISTED_RATIO_MODE)
