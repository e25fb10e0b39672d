"""BiCC's fields: the switch, ratio mode, pairing, context budget and framing text that
both engines read (docs/bicc.md; verl's differences in
:class:`~contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig`)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Literal

from ..algorithms.bicc import (
    BiCCRatioMode,
    BiCCTemplate,
    FramingBudget,
    Pairing,
    Placement,
    Truncation,
)
from ..algorithms.bicc_defaults import RECIPE_BICC_RATIO_MODE
from ..errors import UserError
from .checks import check, check_choices

_TEMPLATE = BiCCTemplate()
#: The options only the distill form reads (refused away from their defaults otherwise).
DISTILL_FIELDS = frozenset(
    {
        "bicc_distill_weight",
        "bicc_distill_rows",
        "bicc_teacher",
        "bicc_distill_is_clip",
        "bicc_distill_max_gap",
        "bicc_distill_center",
    }
)
#: The reference of the conditioned share's KL term (``bicc_kl_reference``).
KLReference = Literal["conditioned", "plain"]
#: What BiCC trains (``bicc_form``): the conditioned distribution (the paper) or the plain
#: prompt's, from the conditioned model as a teacher.
BiCCForm = Literal["conditioned", "distill"]
#: Which rows the conditioned teacher teaches (``bicc_distill_rows``).
DistillRows = Literal["wrong", "both"]
#: The teacher's weights (``bicc_teacher``).
Teacher = Literal["sampling", "reference"]


def _ratio_mode_help() -> str:
    # Read when the class is defined: the built-in recipes' defaults, as the table has them.
    defaults = ", ".join(f"{k}: {v}" for k, v in RECIPE_BICC_RATIO_MODE.items())
    return (
        "'paper': pi_theta(o|[q;O_opp]) / pi_old(o|q); 'consistent': "
        "pi_theta(o|[q;O_opp]) / pi_old(o|[q;O_opp]); 'conditioned_old' (what the "
        "authors' public code intends): pi_theta(o|q) / pi_old(o|[q;O_opp]), the policy "
        f"on the plain prompt (bicc_mix 1 only). None: the recipe's default ({defaults}), "
        "chosen from the step-1 clip fractions and results in docs/bicc.md."
    )


@dataclass
class BiCCFields:
    """Each completion's log-probs are taken on its prompt followed by the group's
    opposite-outcome completions."""

    bicc: bool = field(default=False, metadata={"help": "Bilateral Context Conditioning on/off."})
    bicc_form: BiCCForm | None = field(
        default=None,
        metadata={
            "help": "Unset: 'distill', or 'conditioned' when an option of the paper's form is "
            "set (bicc_ratio_mode, or bicc_mix below 1); the start line says which ran. "
            "'distill' (the default, chosen from docs/results/bicc-forms): the loss is "
            "the recipe's on the plain prompt plus a sampled-token reverse KL towards the "
            "conditioned model as a stop-gradient teacher, so the gradient trains the policy "
            "that samples; 'conditioned': the loss reads each completion after its group's "
            "opposite attempts (the paper's form, with bicc_mix and bicc_ratio_mode: trains "
            "pi(.|[q;O_opp]) only). docs/bicc.md, 'Does BiCC reach the policy that samples?'."
        },
    )
    bicc_distill_weight: float = field(
        default=0.1,
        metadata={
            "help": "bicc_form=distill: the loss is (1 - w) x the recipe's loss + w x the "
            "distillation term (TRL SDPO's distillation_weight), w in [0, 1]."
        },
    )
    bicc_distill_rows: DistillRows = field(
        default="wrong",
        metadata={
            "help": "bicc_form=distill: which rows are taught: 'wrong' (a wrong completion by "
            "the model that read the group's correct attempts, SDPO's direction) or 'both'."
        },
    )
    bicc_teacher: Teacher = field(
        default="sampling",
        metadata={
            "help": "bicc_form=distill: the teacher's weights: 'sampling' (the policy that "
            "sampled the batch, i.e. the live model at scoring time) or 'reference' (the "
            "frozen start model; loads a reference copy). An EMA teacher is not offered."
        },
    )
    bicc_distill_is_clip: float | None = field(
        default=2.0,
        metadata={
            "help": "bicc_form=distill: upper bound of the importance weight pi_theta/pi_old "
            "on the distillation term off policy (SDPO's distillation_is_clip; 1 on policy). "
            "None: no weight."
        },
    )
    bicc_distill_max_gap: float | None = field(
        default=None,
        metadata={
            "help": "bicc_form=distill: bound on |log pi_theta - log pi_teacher| per token "
            "(None: unbounded, as SDPO)."
        },
    )
    bicc_distill_center: bool = field(
        default=False,
        metadata={
            "help": "bicc_form=distill: subtract each row's mean teacher-student gap from its "
            "tokens' gaps, so a context that lowers every token alike (a teacher that does not "
            "read the attempts) teaches nothing (this project's option)."
        },
    )
    bicc_transfer_every: int = field(
        default=10,
        metadata={
            "help": "Every this many optimizer steps (and at the first), log bicc/transfer_cos: "
            "the cosine between the gradient the run applies and plain GRPO's on the plain "
            "prompt, same micro-batch and advantages. Costs one extra backward and one plain "
            "forward and backward on that micro-batch. 0: off."
        },
    )
    bicc_transfer_warn: float = field(
        default=0.2,
        metadata={
            "help": "Warn once when bicc/transfer_cos stays below this for 3 probes in a row: "
            "the update is not reaching the policy that samples."
        },
    )
    bicc_ratio_mode: BiCCRatioMode | None = field(
        default=None, metadata={"help": _ratio_mode_help()}
    )
    bicc_pairing: Pairing = field(
        default="partition",
        metadata={
            "help": "Which opposite completions a row reads: 'partition' (all of its group's, "
            "the paper) or 'one_opposite' (one each, round robin over the opposite side: the "
            "pairing of the authors' public code, docs/bicc.md)."
        },
    )
    bicc_framing_budget: FramingBudget = field(
        default="outside",
        metadata={
            "help": "What the context budget pays for: 'outside' (the attempts' tokens only; "
            "the framing text is added on top, so a short run still carries whole attempts) "
            "or 'inside' (framing and attempts together, this project's earlier default). "
            "The model's positions cap the whole context either way (docs/bicc.md)."
        },
    )
    bicc_kl_reference: KLReference = field(
        default="conditioned",
        metadata={
            "help": "BiCC with beta > 0: the reference of the conditioned share's KL term. "
            "'conditioned': pi_ref(o|[q;O_opp]), so the KL measures only how far the policy "
            "moved (0 at step 1, as plain GRPO's); 'plain': pi_ref(o|q), which adds the "
            "context's own shift (nonzero at step 1). The plain share (bicc_mix < 1) always "
            "uses the plain reference (docs/bicc.md)."
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
    bicc_truncation: Truncation = field(
        default="middle",
        metadata={
            "help": "How an opposite completion longer than its share is cut: 'middle' "
            "(keep head and tail), 'head' or 'tail'."
        },
    )
    bicc_placement: Placement = field(
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

    @property
    def bicc_template(self) -> BiCCTemplate:
        """The BiCC framing text as set by the ``bicc_*`` template fields."""
        return BiCCTemplate.from_fields(self)

    def resolve_bicc_form(self) -> None:
        """An unset ``bicc_form`` becomes ``distill`` (the default, docs/bicc.md), or
        ``conditioned`` when an option only the paper's form reads is set (a ratio mode,
        ``bicc_mix`` below 1): setting one asks for that form, so it is honoured, not
        refused. A form set by hand is kept."""
        if self.bicc_form is None:
            paper = self.bicc_ratio_mode is not None or self.bicc_mix != 1.0
            object.__setattr__(self, "bicc_form", "conditioned" if paper else "distill")

    def check_bicc_fields(self, where: str = "") -> None:
        """Refuse an invalid value of these fields, naming it (``where`` + the field's name);
        an unset ``bicc_form`` is resolved first (:meth:`resolve_bicc_form`)."""
        self.resolve_bicc_form()
        try:
            BiCCTemplate.from_fields(self)  # checks the framing text (its {index} field)
        except ValueError as err:
            raise UserError(f"{where}{err}") from err
        check_choices(self, BiCCFields, where)
        check(
            not (self.bicc_ratio_mode == "conditioned_old" and self.bicc_mix < 1.0),
            where + "bicc_mix",
            self.bicc_mix,
            "must be 1 with bicc_ratio_mode='conditioned_old' (its policy already reads the "
            "plain prompt)",
        )
        check(0.0 <= self.bicc_mix <= 1.0, where + "bicc_mix", self.bicc_mix, "must be in [0, 1]")
        check(
            0.0 <= self.bicc_distill_weight <= 1.0,
            where + "bicc_distill_weight",
            self.bicc_distill_weight,
            "must be in [0, 1]",
        )
        for name in ("bicc_distill_is_clip", "bicc_distill_max_gap"):
            value = getattr(self, name)
            check(value is None or value > 0, where + name, value, "must be positive (or unset)")
        check(
            self.bicc_transfer_every >= 0,
            where + "bicc_transfer_every",
            self.bicc_transfer_every,
            "must be >= 0 (0: off)",
        )
        if self.bicc and self.bicc_form == "conditioned":
            # The distill form's options mean nothing to the paper's form: one set away from
            # its default would be silently ignored, so it is refused.
            for f in fields(BiCCFields):
                if f.name in DISTILL_FIELDS and f.default is not MISSING:
                    value = getattr(self, f.name)
                    check(
                        value == f.default,
                        where + f.name,
                        value,
                        "is read only by bicc_form=distill; this run's form is conditioned "
                        "(the paper's): drop it, or set bicc_form=distill",
                    )
        if self.bicc and self.bicc_form == "distill":
            # The conditioned-loss options mean nothing here: set by hand, they would be
            # silently ignored, so they are refused.
            check(
                self.bicc_mix == 1.0,
                where + "bicc_mix",
                self.bicc_mix,
                "is read only by the paper's form: set bicc_form=conditioned (or leave "
                "bicc_form unset), or use bicc_distill_weight with bicc_form=distill",
            )
            check(
                self.bicc_ratio_mode is None,
                where + "bicc_ratio_mode",
                self.bicc_ratio_mode,
                "is read only by the paper's form (the distill form's loss reads the plain "
                "prompt): set bicc_form=conditioned (or leave bicc_form unset), or leave the "
                "ratio mode unset",
            )
        check(
            0.0 < self.bicc_context_ratio < 1.0,
            where + "bicc_context_ratio",
            self.bicc_context_ratio,
            "must be in (0, 1)",
        )
        check(
            self.bicc_max_seq_len is None or self.bicc_max_seq_len > 0,
            where + "bicc_max_seq_len",
            self.bicc_max_seq_len,
            "must be positive (or unset)",
        )
