"""Recipe and loss options: which algorithm, its clip bounds, KL and aggregation,
ConSPO's schedule and DAPO's extras (dynamic sampling, overlong punishment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...algorithms import AGG_MODES, RECIPES, get_recipe
from ...method_options import AdvantageFields, ConSPOFields, check, finite
from ..trl_settings import resolve_clip, resolve_kl, resolve_loss_type, resolve_scale_rewards


@dataclass
class RecipeOptions(ConSPOFields, AdvantageFields):
    """The recipe and its loss. Fields left ``None`` take the recipe's paper default
    (the README's recipe table); ``config.yaml`` records the resolved values. The fields
    verl reads too (``adv_eps``, ``reward_threshold``, ``conspo_*``) are those of
    :class:`AdvantageFields` and :class:`ConSPOFields`."""

    help_group: ClassVar[str] = "Recipe and loss"

    recipe: str = field(
        default="grpo",
        metadata={"help": f"Algorithm recipe: one of {', '.join(RECIPES)}."},
    )
    # TRL's default (GRPOConfig().beta, 0.0: no reference model), so RLVRConfig(), a TRL
    # YAML and the shipped YAMLs agree; the papers' values are one `beta: null` away.
    beta: float | None = field(
        default=0.0,
        metadata={
            "help": "KL weight to the frozen reference (k3 estimator); 0 (TRL's default) "
            "builds no reference model. null (in a YAML): the recipe's paper value (grpo 0.04, "
            "dr_grpo 0.01, others 0)."
        },
    )
    clip_low: float | None = field(
        default=None, metadata={"help": "Lower clip bound eps_low. None: the recipe's paper value."}
    )
    clip_high: float | None = field(
        default=None,
        metadata={"help": "Upper clip bound eps_high. None: the recipe's paper value."},
    )
    loss_agg: str | None = field(
        default=None,
        metadata={
            "help": f"Token aggregation for grpo/dapo/dr_grpo: one of {', '.join(AGG_MODES)}. "
            "None: the recipe's own."
        },
    )
    # TRL's loss fields, unset by default so that the recipe fills them
    # (trainer/trl_settings.py: honoured, or rejected naming the project's field).
    epsilon: float | None = field(
        default=None,
        metadata={"help": "TRL's name for clip_low (set one of them). None: the recipe's value."},
    )
    loss_type: str | None = field(
        default=None,
        metadata={
            "help": "TRL's loss_type. None: the recipe's (grpo: grpo, dr_grpo: dr_grpo, dapo: "
            "dapo, gspo: grpo). Any TRL value with the recipes TRL has; with the project's "
            "losses only grpo, dapo, dr_grpo (as loss_agg)."
        },
    )
    importance_sampling_level: str | None = field(
        default=None,
        metadata={"help": "TRL's token / sequence ratio. None: sequence for gspo, else token."},
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "TRL's advantage scaling: group, none or batch. None: the recipe's (none for "
            "dr_grpo, else group)."
        },
    )
    use_bias_correction_kl: bool | None = field(
        default=None,
        metadata={
            "help": "TRL's importance weight on the KL term. None: False (the papers' k3 KL); "
            "True needs a recipe TRL has."
        },
    )
    dynamic_sampling: bool | None = field(
        default=None,
        metadata={
            "help": "Replace all-equal groups by newly sampled ones (DAPO). None: on for dapo."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=3, metadata={"help": "Cap on extra generation rounds per batch."}
    )
    overlong_punishment: bool | None = field(
        default=None,
        metadata={"help": "DAPO soft overlong punishment added to the reward. None: on for dapo."},
    )
    overlong_cache_len: int | None = field(
        default=None,
        metadata={
            "help": "Soft buffer L_cache of the overlong punishment. None: a quarter of "
            "max_completion_length."
        },
    )

    def validate_recipe(self) -> None:
        check(self.recipe in RECIPES, "recipe", self.recipe, f"choose one of {', '.join(RECIPES)}")
        check(self.beta is None or self.beta >= 0, "beta", self.beta, "must be >= 0")
        # epsilon / epsilon_high are TRL's names for the clip range; TRL checks neither, so
        # a negative one would train with a clip window that excludes the ratio 1.
        for name in ("clip_low", "clip_high", "epsilon", "epsilon_high"):
            v = getattr(self, name)
            check(
                v is None or (finite(v) and v >= 0),
                name,
                v,
                "must be a finite number >= 0 (or unset for the recipe default)",
            )
        iters = self.num_iterations  # TRL's field: 0 would give a run of no optimizer step
        check(iters >= 1, "num_iterations", iters, "must be >= 1 (updates per generation)")
        check(
            self.loss_agg is None or self.loss_agg in AGG_MODES,
            "loss_agg",
            self.loss_agg,
            f"choose one of {', '.join(AGG_MODES)}",
        )
        self.check_advantage_fields()
        self.check_conspo_fields()
        check(
            self.dynamic_sampling_max_rounds >= 0,
            "dynamic_sampling_max_rounds",
            self.dynamic_sampling_max_rounds,
            "must be >= 0",
        )
        g = self.num_generations  # TRL's field
        check(
            g is None or g >= 2,
            "num_generations",
            g,
            "group-relative methods need at least 2 completions per prompt",
        )

    def resolve_recipe_defaults(self) -> None:
        """Fill the ``None`` fields from the recipe's paper values."""
        recipe = get_recipe(self.recipe)
        if self.beta is None:
            self.beta = recipe.beta
        if self.dynamic_sampling is None:
            self.dynamic_sampling = recipe.dynamic_sampling
        if self.overlong_punishment is None:
            self.overlong_punishment = recipe.overlong_punishment
        if self.overlong_punishment and self.overlong_cache_len is None:
            self.overlong_cache_len = max(1, (self.max_completion_length or 1) // 4)
        # TRL's own loss fields: honoured (mapped onto TRL's or the project's loss) or
        # rejected naming the project's field.
        resolve_clip(self)
        resolve_loss_type(self)
        resolve_scale_rewards(self)
        resolve_kl(self)

    def validate_recipe_layout(self) -> None:
        """Checks that need TRL's resolved lengths."""
        if self.overlong_punishment:
            check(
                0 < (self.overlong_cache_len or 0) <= (self.max_completion_length or 0),
                "overlong_cache_len",
                self.overlong_cache_len,
                "must be in (0, max_completion_length]",
            )
