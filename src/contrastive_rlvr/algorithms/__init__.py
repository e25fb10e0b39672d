"""The algorithm core: pure PyTorch functions on tensors, no trainer imports.

Layout of every batch: ``B`` rows laid out group by group (``group_size``
consecutive rows share one prompt), ``T`` completion tokens, masks 1 on
completion tokens.
"""

from .advantages import (
    collapse_rate,
    group_advantages,
    group_covariance,
    rcc_advantages,
    rcc_baseline,
    sequence_delta,
)
from .aggregation import AGG_MODES, agg_loss
from .bicc import (
    BICC_RATIO_MODES,
    BiCCPrompts,
    BiCCTemplate,
    EncodedTemplate,
    build_bicc_prompts,
    partition_by_reward,
)
from .conspo import conspo_loss, conspo_margin
from .dapo import informative_groups, overlong_penalty
from .losses import (
    POLICY_LOSSES,
    get_policy_loss,
    k3_kl,
    loss_option_names,
    policy_loss,
    register_policy_loss,
)
from .passk import avg_at_n, pass_at_k
from .registry import RECIPES, Recipe, get_recipe, recipe_advantages, register_recipe

__all__ = [
    "AGG_MODES",
    "BICC_RATIO_MODES",
    "POLICY_LOSSES",
    "RECIPES",
    "BiCCPrompts",
    "BiCCTemplate",
    "EncodedTemplate",
    "Recipe",
    "agg_loss",
    "avg_at_n",
    "build_bicc_prompts",
    "collapse_rate",
    "conspo_loss",
    "conspo_margin",
    "get_policy_loss",
    "get_recipe",
    "group_advantages",
    "group_covariance",
    "informative_groups",
    "k3_kl",
    "loss_option_names",
    "overlong_penalty",
    "partition_by_reward",
    "pass_at_k",
    "policy_loss",
    "rcc_advantages",
    "rcc_baseline",
    "recipe_advantages",
    "register_policy_loss",
    "register_recipe",
    "sequence_delta",
]
