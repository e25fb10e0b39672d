"""Token-level method options: VeriGate, ReCo and OC-GRPO (docs/token-methods.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from ...algorithms.ocgrpo import (
    DEFAULT_HINT_TEMPLATE,
    OC_MAX_WEIGHT,
    HintUnit,
    MixMode,
    WeightLevel,
)
from ...algorithms.reco import Factor, FactorNorm, ResponseWeights
from ...algorithms.verigate import ProcessNorm, StepRule
from ...method_options import check, check_choices


@dataclass
class TokenMethodOptions:
    """VeriGate's process advantages, ReCo's occurrence weights, OC-GRPO's hinted round."""

    help_group: ClassVar[str] = "Token-level methods (VeriGate, ReCo, OC-GRPO)"

    verigate: bool = field(
        default=False,
        metadata={
            "help": "VeriGate: groups whose verifier rewards are all equal get token-level "
            "advantages from process (step) scores (docs/token-methods.md)."
        },
    )
    verigate_step_rule: StepRule = field(
        default="lines",
        metadata={
            "help": "How a completion is split into steps: 'lines', 'chain' (pieces between "
            "',' and newlines: the embedded task's worked chains) or 'regex' "
            "(verigate_step_pattern)."
        },
    )
    verigate_step_pattern: str | None = field(
        default=None, metadata={"help": "Regular expression of one step, for rule 'regex'."}
    )
    verigate_scorer: str = field(
        default="arithmetic",
        metadata={
            "help": "Process scorer: 'arithmetic' (exact step checker), the directory of a local "
            "Hugging Face sequence-classification PRM, or 'module:function' / 'file.py:function' "
            "of a callable (prompt, steps) -> one score per step."
        },
    )
    verigate_process_norm: ProcessNorm = field(
        default="steps",
        metadata={
            "help": "'steps' (default): normalise the step scores over the group, then give each "
            "step the sum of its own and later steps' normalised scores (DeepSeekMath; an "
            "all-right group gets 0); 'cumulated': cumulate, then normalise."
        },
    )
    reco: bool = field(
        default=False,
        metadata={
            "help": "ReCo: occurrence-weighted responses and a variance factor in place of the "
            "token ratio (docs/token-methods.md)."
        },
    )
    reco_weights: ResponseWeights = field(
        default="count",
        metadata={
            "help": "ReCo's response weights: 'count' (1 / the number of rows of the group with "
            "the same response, reco_identity) or 'expected' (1 / max(1, G pi_old(o | q)), the "
            "expected occurrence in G draws: down-weights a response the sampler would draw "
            "more than once even when drawn once)."
        },
    )
    reco_identity: Literal["tokens", "answer"] = field(
        default="tokens",
        metadata={
            "help": "With reco_weights='count', which completions count as the same response: "
            "'tokens' (same token ids) or 'answer' (same extracted final answer; completions "
            "without one by token ids)."
        },
    )
    reco_factor: Factor = field(
        default="variance",
        metadata={
            "help": "ReCo's token factor in place of the ratio: 'variance' (p(1-p) of the sampled "
            "token) or 'entropy' (entropy of the current policy's next-token distribution, "
            "from the loss forward; does not vanish for a rare sampled token; with "
            "reco_factor_norm='mean' its Z is the micro-batch's mean entropy)."
        },
    )
    reco_factor_norm: FactorNorm = field(
        default="mean",
        metadata={
            "help": "Normaliser Z of the factor f/Z: 'mean' (the batch's mean factor) or 'max' "
            "(1/4 for p(1-p), log V for the entropy)."
        },
    )
    oc_grpo: bool = field(
        default=False,
        metadata={
            "help": "OC-GRPO: groups with no correct completion are sampled again with a prefix "
            "of the reference solution in the prompt and trained toward the unguided prompt."
        },
    )
    oc_hint_fraction: float = field(
        default=0.5, metadata={"help": "Share of the reference solution given as the hint, [0, 1]."}
    )
    oc_hint_unit: HintUnit = field(
        default="chars", metadata={"help": "Unit the hint fraction counts: 'chars' or 'words'."}
    )
    oc_hint_template: str = field(
        default=DEFAULT_HINT_TEMPLATE,
        metadata={"help": "The guided prompt, with {hint} and {prompt}."},
    )
    oc_max_weight: float = field(
        default=OC_MAX_WEIGHT,
        metadata={"help": "W, the truncation of pi_theta(o|q) / pi_old(o|q,hint)."},
    )
    oc_weight_level: WeightLevel = field(
        default="token",
        metadata={"help": "Importance weight per 'token', per 'sequence' or 'geometric' mean."},
    )
    oc_merge: MixMode = field(
        default="replace",
        metadata={
            "help": "A rescued guided group 'replace's its all-fail group or is 'append'ed to the "
            "batch (single process only)."
        },
    )
    oc_solution_column: str = field(
        default="solution",
        metadata={"help": "Dataset column holding the reference solution the hint is cut from."},
    )

    def validate_token_methods(self) -> None:
        check_choices(self, TokenMethodOptions)  # every Literal field holds one of its choices
        check(
            (self.verigate_step_rule == "regex") == bool(self.verigate_step_pattern),
            "verigate_step_pattern",
            self.verigate_step_pattern,
            "set it exactly when verigate_step_rule='regex'",
        )
        check(
            not (self.reco_weights == "expected" and self.reco_identity == "answer"),
            "reco_identity",
            self.reco_identity,
            "reco_weights='expected' weighs each response by its own pi_old and uses no identity "
            "key; leave reco_identity='tokens' or use reco_weights='count'",
        )
        scorer = self.verigate_scorer
        check(
            scorer == "arithmetic" or ":" in scorer or Path(scorer).is_dir(),
            "verigate_scorer",
            scorer,
            "use 'arithmetic', an existing PRM directory, or 'module:function'",
        )
        check(
            0.0 <= self.oc_hint_fraction <= 1.0,
            "oc_hint_fraction",
            self.oc_hint_fraction,
            "must be in [0, 1]",
        )
        check(self.oc_max_weight > 0, "oc_max_weight", self.oc_max_weight, "must be > 0")
        check(
            "{hint}" in self.oc_hint_template and "{prompt}" in self.oc_hint_template,
            "oc_hint_template",
            self.oc_hint_template,
            "must contain {hint} and {prompt}",
        )

    def validate_seed_layout(self) -> None:
        """OC-GRPO's checks that need TRL's resolved batch layout."""
        if not self.oc_grpo:
            return
        g = self.num_generations
        rows = self.per_device_train_batch_size * self.steps_per_generation
        # Guided rounds run per process on its own all-fail groups, so those must be whole.
        check(
            rows % g == 0,
            "per_device_train_batch_size",
            self.per_device_train_batch_size,
            f"with oc_grpo=True, per_device_train_batch_size * steps_per_generation ({rows}) "
            f"must be a multiple of num_generations={g}",
        )
        if self.oc_merge == "append":
            # Appended groups must split evenly into the window's micro-batches.
            check(
                g % self.steps_per_generation == 0,
                "oc_merge",
                self.oc_merge,
                f"'append' needs num_generations={g} to be a multiple of "
                f"steps_per_generation={self.steps_per_generation}; use 'replace'",
            )
