"""Embedded task options: the offline arithmetic task and its warm start (docs/bicc.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...method_options import check, check_choices, finite
from ...rewards.extract import AnswerReading

#: Fields whose default is kept for the embedded model; setting them means a custom model.
CUSTOM_ONLY = {
    "dataset": None,
    "rewards": ["math_verify"],
    "answer_line": AnswerReading.answer_line,
    "answer_phrase": AnswerReading.answer_phrase,
    "last_number_fallback": AnswerReading.last_number_fallback,
    "heldout_reward": None,
}


@dataclass
class EmbeddedTaskOptions:
    """The embedded model's task and its SFT warm start."""

    help_group: ClassVar[str] = "Embedded task"

    embedded_terms: int = field(
        default=3,
        metadata={
            "help": "Embedded task: operands per problem (3: 'a+b+c=', one worked step; "
            "4 or more: longer chains)."
        },
    )
    embedded_hidden_ops: bool = field(
        default=False,
        metadata={
            "help": "Embedded task: the hidden-operator variant ('5?4?3=' is 5+4-3: each '?' is "
            "'+' before an even operand, '-' before an odd one), whose warm start does not know "
            "the rule: the group's correct attempts show what the prompt hides (docs/bicc.md, "
            "'A task where the premise holds')."
        },
    )
    embedded_sft_steps: int | None = field(
        default=None,
        metadata={"help": "Embedded default: SFT warm-start steps (None: its default; 0: none)."},
    )
    embedded_sft_context_frac: float = field(
        default=0.0,
        metadata={
            "help": "Embedded model: share of SFT demonstrations shown after a BiCC context of "
            "opposite attempts that the demonstrator reads (docs/bicc.md); 0 is the plain warm "
            "start."
        },
    )
    embedded_bicc_phrases: bool = field(
        default=False,
        metadata={
            "help": "Embedded model: give each piece of BiCC's default framing (headers, "
            "'Attempt k: ', footer) one token instead of one per character, so BiCC's context "
            "budget holds the attempts (at 102 tokens the character framing leaves room for "
            "at most three attempts, cut to 5 characters); changes the tokenizer, so the warm "
            "start is built for it."
        },
    )
    embedded_sft_context_target: Literal["avoid", "reference"] = field(
        default="avoid",
        metadata={
            "help": "Embedded reading warm start: what the demonstrator writes after wrong "
            "attempts. 'avoid': a noisy demonstration repeating none of the shown answers; "
            "'reference': the reference chain (the framing is decisive). After correct "
            "attempts it is the reference chain in both. Contexts are cut to this run's BiCC "
            "budget (bicc_context_ratio, bicc_max_seq_len, bicc_truncation), as RL cuts them "
            "(docs/bicc.md)."
        },
    )
    embedded_sft_context_attempts: Literal["demonstrator", "sampled"] = field(
        default="demonstrator",
        metadata={
            "help": "Embedded reading warm start: where the attempts in its contexts come "
            "from. 'demonstrator': the demonstrator's slips (results off by 1 or 10); "
            "'sampled': the model's own samples (num_generations per problem, this run's "
            "max_completion_length and temperature), re-sampled every 100 SFT steps from a "
            "quarter of the steps on and laid out by BiCC's own prompt builder, so the contexts "
            "are the ones RL will show (docs/bicc.md)."
        },
    )

    def validate_embedded(self) -> None:
        """The embedded task's warm start."""
        check_choices(self, EmbeddedTaskOptions)  # embedded_sft_context_target, _attempts
        check(
            self.embedded_sft_steps is None or self.embedded_sft_steps >= 0,
            "embedded_sft_steps",
            self.embedded_sft_steps,
            "must be >= 0 (0: no warm start)",
        )
        check(
            finite(self.embedded_sft_context_frac) and 0 <= self.embedded_sft_context_frac <= 1,
            "embedded_sft_context_frac",
            self.embedded_sft_context_frac,
            "must be in [0, 1] (0: the plain warm start)",
        )
        reading = (self.embedded_sft_context_target, self.embedded_sft_context_attempts)
        check(
            self.embedded_sft_context_frac > 0 or reading == ("avoid", "demonstrator"),
            "embedded_sft_context_frac",
            self.embedded_sft_context_frac,
            "must be > 0 when embedded_sft_context_target or embedded_sft_context_attempts "
            "is set (they shape the reading demonstrations, which a share of 0 leaves out)",
        )
