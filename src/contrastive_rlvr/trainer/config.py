"""The training configuration: TRL's ``GRPOConfig`` plus this project's groups.

:class:`RLVRConfig` is one dataclass (one YAML file, one set of ``--field``
options) made of the groups in :mod:`.config_groups`, one per concern: model
and data, recipe and loss, BiCC, RCC, seed methods, diagnostics. Every field is
documented once (its ``help`` is the ``train --help`` text) and validated in
``__post_init__`` before any model loads: each group checks its own fields,
this class the combinations; an invalid value raises a ``ValueError`` naming the
field, the value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from trl import GRPOConfig

from ..algorithms import check_seed_method_compat
from .config_groups import (
    BiCCOptions,
    DataOptions,
    DiagnosticsOptions,
    RCCOptions,
    RecipeOptions,
    SeedMethodOptions,
)
from .trl_settings import check_project_loss_options


@dataclass
class RLVRConfig(
    DataOptions,
    RecipeOptions,
    BiCCOptions,
    RCCOptions,
    SeedMethodOptions,
    DiagnosticsOptions,
    GRPOConfig,
):
    """Configuration of a contrastive-rlvr training run (extends ``trl.GRPOConfig``).

    Fields left ``None`` take the recipe's paper default (see the README's
    recipe table); the resolved values are what ``config.yaml`` in the output
    directory records. The fields and their checks live in the groups of
    :mod:`contrastive_rlvr.trainer.config_groups`.
    """

    def __post_init__(self) -> None:
        self.validate_data()
        self.validate_recipe()
        self.validate_bicc()
        self.validate_rcc()
        self.validate_diagnostics()
        self.resolve_recipe_defaults()
        self.validate_seed_methods()
        self._validate_combinations()
        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which transformers refuses on a CPU-only machine.
            self.bf16 = torch.cuda.is_available() and not self.use_cpu
        super().__post_init__()
        self.validate_recipe_layout()
        self.validate_seed_layout()
        self._validate_whole_groups()

    def _validate_combinations(self) -> None:
        """Checks across groups: the methods that can be combined with the recipe."""
        check_seed_method_compat(
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
