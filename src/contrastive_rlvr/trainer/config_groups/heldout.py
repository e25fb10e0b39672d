"""Held-out options: the problems held out of training and scored avg@n before and
after RL."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...method_options import check


@dataclass
class HeldoutOptions:
    """The held-out avg@n around the run."""

    help_group: ClassVar[str] = "Held-out evaluation"

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
    eval_n: int = field(
        default=4, metadata={"help": "Samples per held-out problem for avg@n before and after RL."}
    )
    eval_limit: int | None = field(
        default=None, metadata={"help": "Evaluate on at most this many held-out problems."}
    )

    def validate_heldout(self) -> None:
        check(self.eval_n >= 1, "eval_n", self.eval_n, "must be >= 1")
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
