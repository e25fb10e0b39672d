"""BiCC options: Bilateral Context Conditioning's switch, ratio mode, loss mix,
context budget and framing text (docs/bicc.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...algorithms import BICC_PLACEMENTS, BICC_RATIO_MODES, BiCCTemplate
from ...algorithms.bicc_defaults import RECIPE_BICC_RATIO_MODE, default_bicc_ratio_mode
from ..preflight import UserError
from .common import check

# RECIPE_BICC_RATIO_MODE (the per-recipe default of bicc_ratio_mode) lives in
# algorithms.bicc_defaults, which verl's config reads too; tested against docs/bicc.md in
# tests/trainer/test_bicc_ratio_mode_default.py.

_TEMPLATE = BiCCTemplate()


@dataclass
class BiCCOptions:
    """Each completion's log-probs are taken on its prompt followed by the group's
    opposite-outcome completions."""

    help_group: ClassVar[str] = "BiCC (Bilateral Context Conditioning)"

    bicc: bool = field(default=False, metadata={"help": "Bilateral Context Conditioning on/off."})
    bicc_ratio_mode: Literal["paper", "consistent", "conditioned_old"] | None = field(
        default=None,
        metadata={
            "help": "'paper': pi_theta(o|[q;O_opp]) / pi_old(o|q); 'consistent': "
            "pi_theta(o|[q;O_opp]) / pi_old(o|[q;O_opp]); 'conditioned_old' (what the "
            "authors' public code intends): pi_theta(o|q) / pi_old(o|[q;O_opp]), the policy "
            "on the plain prompt (bicc_mix 1 only). None: the recipe's default ("
            + ", ".join(f"{k}: {v}" for k, v in RECIPE_BICC_RATIO_MODE.items())
            + "), chosen from the step-1 clip fractions and results in docs/bicc.md."
        },
    )
    bicc_pairing: Literal["partition", "one_opposite"] = field(
        default="partition",
        metadata={
            "help": "Which opposite completions a row reads: 'partition' (all of its group's, "
            "the paper) or 'one_opposite' (one each, round robin over the opposite side: the "
            "pairing of the authors' public code, docs/bicc.md)."
        },
    )
    bicc_framing_budget: Literal["outside", "inside"] = field(
        default="outside",
        metadata={
            "help": "What the context budget pays for: 'outside' (the attempts' tokens only; "
            "the framing text is added on top, so a short run still carries whole attempts) "
            "or 'inside' (framing and attempts together, this project's earlier default). "
            "The model's positions cap the whole context either way (docs/bicc.md)."
        },
    )
    bicc_kl_reference: Literal["conditioned", "plain"] = field(
        default="conditioned",
        metadata={
            "help": "BiCC with beta > 0: the reference of the conditioned share's KL term. "
            "'conditioned': pi_ref(o|[q;O_opp]), so the KL measures only how far the policy "
            "moved (0 at step 1, as plain GRPO's); 'plain': pi_ref(o|q), which adds the "
            "context's own shift (nonzero at step 1). The plain share (bicc_mix < 1) always "
            "uses the plain reference (docs/bicc.md)."
        },
    )
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
    bicc_mix: float = field(
        default=1.0,
        metadata={
            "help": "Share of the loss (policy or ConSPO) computed on the conditioned prompts; the "
            "rest on the plain prompts. 1.0 is BiCC as the paper states it; lower values "
            "are this project's option (docs/bicc.md). Read only with bicc on."
        },
    )
    bicc_context_ratio: float = field(
        default=0.4,
        metadata={
            "help": "Share of the sequence given to the opposite completions, in (0, 1): "
            "floor(ratio x (longest prompt + max_completion_length)) tokens, or of "
            "bicc_max_seq_len when set."
        },
    )
    bicc_max_seq_len: int | None = field(
        default=None,
        metadata={
            "help": "Length the context budget is a share of. None: the run's own sequence "
            "length (longest prompt of the batch + max_completion_length). The budget is "
            "also capped so prompt + context + completion fit in the model's positions."
        },
    )
    bicc_truncation: Literal["middle", "head", "tail"] = field(
        default="middle",
        metadata={
            "help": "How an opposite completion longer than its share is cut: 'middle' "
            "(keep head and tail), 'head' or 'tail'."
        },
    )
    bicc_placement: Literal["auto", "user_turn", "after_prompt", "before_prompt"] = field(
        default="auto",
        metadata={
            "help": "'user_turn' (chat prompts: the attempts at the end of the user message, "
            "rendered with the chat template), 'after_prompt' ([q ; O] after the rendered "
            "prompt, the paper), 'before_prompt', or 'auto' (user_turn for chat prompts, "
            "after_prompt for text)."
        },
    )
    bicc_header_correct: str = field(
        default=_TEMPLATE.header_correct, metadata={"help": "Text before correct completions."}
    )
    bicc_header_wrong: str = field(
        default=_TEMPLATE.header_wrong, metadata={"help": "Text before wrong completions."}
    )
    bicc_item_prefix: str = field(
        default=_TEMPLATE.item_prefix,
        metadata={"help": "Text before each completion; may use {index}."},
    )
    bicc_item_suffix: str = field(
        default=_TEMPLATE.item_suffix, metadata={"help": "Text after each completion."}
    )
    bicc_footer: str = field(
        default=_TEMPLATE.footer, metadata={"help": "Text closing the context."}
    )

    def validate_bicc(self) -> None:
        try:
            BiCCTemplate.from_fields(self)  # checks the framing text (its {index} field)
        except ValueError as err:
            raise UserError(str(err)) from err
        check(
            self.bicc_ratio_mode is None or self.bicc_ratio_mode in BICC_RATIO_MODES,
            "bicc_ratio_mode",
            self.bicc_ratio_mode,
            f"choose one of {', '.join(BICC_RATIO_MODES)}, or leave it unset for the "
            "recipe's default",
        )
        check(
            self.bicc_pairing in ("partition", "one_opposite"),
            "bicc_pairing",
            self.bicc_pairing,
            "choose 'partition' or 'one_opposite'",
        )
        check(
            self.bicc_framing_budget in ("outside", "inside"),
            "bicc_framing_budget",
            self.bicc_framing_budget,
            "choose 'outside' or 'inside'",
        )
        check(
            not (self.bicc_ratio_mode == "conditioned_old" and self.bicc_mix < 1.0),
            "bicc_mix",
            self.bicc_mix,
            "must be 1 with bicc_ratio_mode='conditioned_old' (its policy already reads the "
            "plain prompt)",
        )
        check(
            self.bicc_kl_reference in ("conditioned", "plain"),
            "bicc_kl_reference",
            self.bicc_kl_reference,
            "choose 'conditioned' or 'plain'",
        )
        check(0.0 <= self.bicc_mix <= 1.0, "bicc_mix", self.bicc_mix, "must be in [0, 1]")
        check(
            0.0 < self.bicc_context_ratio < 1.0,
            "bicc_context_ratio",
            self.bicc_context_ratio,
            "must be in (0, 1)",
        )
        check(
            self.bicc_max_seq_len is None or self.bicc_max_seq_len > 0,
            "bicc_max_seq_len",
            self.bicc_max_seq_len,
            "must be positive",
        )
        check(
            self.bicc_truncation in ("middle", "head", "tail"),
            "bicc_truncation",
            self.bicc_truncation,
            "choose 'middle', 'head' or 'tail'",
        )
        check(
            self.bicc_placement in BICC_PLACEMENTS,
            "bicc_placement",
            self.bicc_placement,
            f"choose one of {', '.join(BICC_PLACEMENTS)}",
        )

    def resolve_bicc_defaults(self) -> None:
        """An unset ``bicc_ratio_mode`` takes the recipe's default; a value the user set is
        kept (``config.yaml`` records the resolved one either way)."""
        if self.bicc_ratio_mode is None:
            self.bicc_ratio_mode = default_bicc_ratio_mode(self.recipe)

    @property
    def bicc_template(self) -> BiCCTemplate:
        """The BiCC framing text as set by the ``bicc_*`` template fields."""
        return BiCCTemplate.from_fields(self)
