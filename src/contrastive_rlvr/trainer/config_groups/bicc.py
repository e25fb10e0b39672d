"""BiCC options: Bilateral Context Conditioning's switch, ratio mode, loss mix,
context budget and framing text (docs/bicc.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...algorithms.bicc_defaults import default_bicc_ratio_mode
from ...method_options import BiCCFields

# The fields both engines read (their names, defaults, choices, help and checks) are
# BiCCFields' (method_options/bicc.py); RECIPE_BICC_RATIO_MODE (the per-recipe default of
# bicc_ratio_mode) lives in algorithms.bicc_defaults, which verl's config reads too; tested
# against docs/bicc.md in tests/trainer/test_bicc_ratio_mode_default.py.


@dataclass
class BiCCOptions(BiCCFields):
    """Each completion's log-probs are taken on its prompt followed by the group's
    opposite-outcome completions: the shared fields of :class:`BiCCFields` and the TRL
    path's own prompt sharing."""

    help_group: ClassVar[str] = "BiCC (Bilateral Context Conditioning)"

    share_prefix: bool = field(
        default=True,
        metadata={
            "help": "BiCC: encode each distinct conditioned prompt once for the completions of "
            "its partition (same log-probs, fewer tokens): one packed forward where the model's "
            "attention takes it (sdpa, eager), else the key/value-cache form in one process "
            "without gradient checkpointing, else per row; the choice is logged "
            "(docs/performance.md)."
        },
    )
    share_plain_prompt: bool = field(
        default=False,
        metadata={
            "help": "Encode each group's plain prompt once for its G completions, the same way "
            "(any recipe, BiCC or not; same log-probs within float rounding). Off by default so "
            "that without the project's additions every forward is TRL's own; worth it for "
            "long prompts (docs/performance.md)."
        },
    )

    def validate_bicc(self) -> None:
        self.check_bicc_fields()

    def resolve_bicc_defaults(self) -> None:
        """An unset ``bicc_ratio_mode`` takes the recipe's default; a value the user set is
        kept (``config.yaml`` records the resolved one either way). The distill form reads
        no ratio mode: it stays unset."""
        if self.bicc_ratio_mode is None and self.bicc_form != "distill":
            self.bicc_ratio_mode = default_bicc_ratio_mode(self.recipe)
