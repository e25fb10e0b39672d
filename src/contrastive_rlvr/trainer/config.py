"""The training configuration: TRL's ``GRPOConfig`` plus this project's groups.

:class:`RLVRConfig` is one dataclass (one YAML file, one set of ``--field``
options) made of the groups in :mod:`.config_groups`, one per concern: model
and data, recipe and loss, BiCC, RCC, token-level methods, diagnostics. Every field is
documented once (its ``help`` is the ``train --help`` text) and validated in
``__post_init__`` before any model loads: each group checks its own fields,
this class the combinations; an invalid value raises a ``ValueError`` naming the
field, the value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from trl import GRPOConfig, ModelConfig

from ..algorithms import check_token_method_compat
from .config_groups import (
    BiCCOptions,
    DataOptions,
    DiagnosticsOptions,
    RCCOptions,
    RecipeOptions,
    TokenMethodOptions,
    check,
    finite,
)
from .trl_settings import check_project_loss_options


@dataclass
class RLVRConfig(
    DataOptions,
    RecipeOptions,
    BiCCOptions,
    RCCOptions,
    TokenMethodOptions,
    DiagnosticsOptions,
    ModelConfig,
    GRPOConfig,
):
    """Configuration of a contrastive-rlvr training run (extends ``trl.GRPOConfig`` and
    carries ``trl.ModelConfig``'s fields, so a TRL script's YAML and options work as they
    are: ``model_name_or_path`` (the same as ``model``), ``dtype``, ``attn_implementation``,
    ``model_revision``, ``use_peft`` and the ``lora_*`` fields, ``load_in_4bit``/``8bit``).

    Fields left ``None`` take the recipe's paper default (see the README's
    recipe table); the resolved values are what ``config.yaml`` in the output
    directory records. The fields and their checks live in the groups of
    :mod:`contrastive_rlvr.trainer.config_groups`.
    """

    def __post_init__(self) -> None:
        self._validate_ranges()
        self.validate_data()
        self.validate_recipe()
        self.validate_bicc()
        self.validate_rcc()
        self.validate_diagnostics()
        self.resolve_recipe_defaults()
        self.resolve_bicc_defaults()
        self.validate_token_methods()
        self._validate_combinations()
        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which transformers refuses on a CPU-only machine.
            self.bf16 = torch.cuda.is_available() and not self.use_cpu
        # Both TRL parents' checks (neither calls the other's).
        ModelConfig.__post_init__(self)
        GRPOConfig.__post_init__(self)
        self.validate_recipe_layout()
        self.validate_seed_layout()
        self._validate_whole_groups()

    def _validate_ranges(self) -> None:
        """Values TRL's ``TrainingArguments`` accepts but no run can use (a NaN learning
        rate, ``max_steps=-5``), refused before TRL's own checks and any model load."""
        lr = self.learning_rate
        check(finite(lr) and lr > 0, "learning_rate", lr, "must be a finite number > 0")
        t = self.temperature
        check(finite(t) and t > 0, "temperature", t, "sampling needs a finite temperature > 0")
        check(finite(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")
        if self.max_steps == -1:
            epochs = self.num_train_epochs
            check(
                finite(epochs) and epochs > 0,
                "max_steps=-1 with num_train_epochs",
                epochs,
                "with max_steps=-1 the run length is num_train_epochs, which must be > 0",
            )
        else:
            check(
                self.max_steps >= 1,
                "max_steps",
                self.max_steps,
                "give a number of optimizer steps >= 1, or -1 to train for num_train_epochs",
            )
        for name in ("max_completion_length", "per_device_train_batch_size"):
            value = getattr(self, name)
            check(value is None or value >= 1, name, value, "must be >= 1")
        accum = self.gradient_accumulation_steps
        check(accum >= 1, "gradient_accumulation_steps", accum, "must be >= 1")
        # reward_threshold and adv_eps are the recipe group's; checked here with TRL's
        # numbers until validate_recipe takes them.
        for name in ("weight_decay", "adam_epsilon", "reward_threshold", "adv_eps"):
            value = getattr(self, name)
            check(finite(value), name, value, "must be a finite number")
        check(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "must be > 0")
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            check(finite(value) and 0 <= value < 1, name, value, "must be in [0, 1)")
        norm = self.max_grad_norm
        check(
            norm is None or (finite(norm) and norm >= 0),
            "max_grad_norm",
            norm,
            "must be finite and >= 0",
        )
        weights = self.reward_weights
        check(
            weights is None or all(finite(w) for w in weights),
            "reward_weights",
            weights,
            "every weight must be finite",
        )

    def _validate_combinations(self) -> None:
        """Checks across groups: the methods that can be combined with the recipe."""
        check_token_method_compat(
            self.recipe,
            verigate=self.verigate,
            reco=self.reco,
            oc_grpo=self.oc_grpo,
            bicc=self.bicc,
            rcc=self.rcc,
            dynamic_sampling=self.dynamic_sampling,
        )
        if (self.verigate or self.oc_grpo) and self.rcc and self.rcc_reference == "sampling":
            method = "verigate" if self.verigate else "oc_grpo"
            raise ValueError(
                f"{method}=True and rcc_reference='sampling' cannot be combined: the sampling "
                "reference recomputes per-row advantages at loss time, which would drop "
                f"{method}'s advantages; use rcc_reference='reference'"
            )
        check_project_loss_options(self)

    def _validate_whole_groups(self) -> None:
        """ConSPO and RCC's sampling reference need whole groups in every micro-batch."""
        g = self.num_generations
        whole_groups_needed = self.recipe == "conspo" or (
            self.rcc and self.rcc_reference == "sampling"
        )
        if whole_groups_needed and self.per_device_train_batch_size % g != 0:
            what = "recipe='conspo'" if self.recipe == "conspo" else "rcc_reference='sampling'"
            raise ValueError(
                f"per_device_train_batch_size={self.per_device_train_batch_size} is invalid "
                f"with {what}: "
                f"the loss needs whole groups in every micro-batch, so it must be a multiple of "
                f"num_generations={g}"
            )
