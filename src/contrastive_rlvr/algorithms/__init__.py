"""The algorithm core: pure PyTorch functions on tensors, no trainer imports.

Layout of every batch: ``B`` rows laid out group by group (``group_size``
consecutive rows share one prompt), ``T`` completion tokens, masks 1 on
completion tokens.
"""

from .advantages import (
    DEFAULT_RCC_BOUND,
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
    BiCCTemplate,
    build_bicc_prompts,
    context_budget,
    partition_by_reward,
)
from .conspo import conspo_loss, conspo_margin, usable_groups
from .dapo import informative_groups, overlong_penalty
from .losses import (
    POLICY_LOSSES,
    ClipOptions,
    get_policy_loss,
    k3_kl,
    loss_option_names,
    policy_loss,
    register_policy_loss,
)
from .ocgrpo import all_fail_groups, guided_prompt, hint_prefix, oc_importance_weight, oc_merge
from .passk import avg_at_n, pass_at_k
from .reco import (
    completion_keys,
    distinct_share,
    expected_occurrence_weights,
    occurrence_weights,
    variance_factor,
)
from .registry import RECIPES, Recipe, get_recipe, recipe_advantages, register_recipe
from .sampling_correction import corrected_advantages, off_policy_mask, row_weights
from .step_checker import ArithmeticStepScorer, equations_right
from .token_methods import TOKEN_METHOD_RECIPES, check_token_method_compat, token_method_loss
from .verigate import (
    ProcessScorer,
    future_cumulated,
    gated_groups,
    process_advantages,
    score_steps,
    split_steps,
    step_of_tokens,
    token_offsets,
    token_step_index,
    verigate_advantages,
)

__all__ = [
    "AGG_MODES",
    "BICC_RATIO_MODES",
    "DEFAULT_RCC_BOUND",
    "POLICY_LOSSES",
    "RECIPES",
    "TOKEN_METHOD_RECIPES",
    "ArithmeticStepScorer",
    "BiCCTemplate",
    "ClipOptions",
    "ProcessScorer",
    "Recipe",
    "agg_loss",
    "all_fail_groups",
    "avg_at_n",
    "build_bicc_prompts",
    "context_budget",
    "check_token_method_compat",
    "collapse_rate",
    "completion_keys",
    "conspo_loss",
    "corrected_advantages",
    "off_policy_mask",
    "row_weights",
    "usable_groups",
    "conspo_margin",
    "distinct_share",
    "equations_right",
    "expected_occurrence_weights",
    "future_cumulated",
    "gated_groups",
    "get_policy_loss",
    "get_recipe",
    "group_advantages",
    "group_covariance",
    "guided_prompt",
    "hint_prefix",
    "informative_groups",
    "k3_kl",
    "loss_option_names",
    "oc_importance_weight",
    "oc_merge",
    "occurrence_weights",
    "overlong_penalty",
    "partition_by_reward",
    "pass_at_k",
    "policy_loss",
    "process_advantages",
    "rcc_advantages",
    "rcc_baseline",
    "recipe_advantages",
    "register_policy_loss",
    "register_recipe",
    "score_steps",
    "token_method_loss",
    "sequence_delta",
    "split_steps",
    "step_of_tokens",
    "token_offsets",
    "token_step_index",
    "variance_factor",
    "verigate_advantages",
]
