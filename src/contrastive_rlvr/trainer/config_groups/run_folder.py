"""Run-folder options: resuming, replacing another run's files, and the copy that rolls
back a step that makes the weights non-finite (docs/reliability.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...method_options import check
from ..update_guards import DEFAULT_SNAPSHOT_BYTES


@dataclass
class RunFolderOptions:
    """What a run does with its output_dir and with a step it must undo."""

    help_group: ClassVar[str] = "Resuming, overwriting and rollback"

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
    rollback_snapshot_max_bytes: int = field(
        default=DEFAULT_SNAPSHOT_BYTES,
        metadata={
            "help": "Largest CPU copy (trainable parameters + optimizer state, bytes) kept "
            "before each optimizer step, so that a step that makes the weights non-finite is "
            "rolled back (counted); a larger model stops with an error at such a step. 0: no "
            "copy."
        },
    )

    def validate_run_folder(self) -> None:
        """TRL's ``resume_from_checkpoint``: ``true`` is ``resume=true`` (the newest complete
        checkpoint in output_dir), a path resumes from that checkpoint (checked whole before
        any model loads), ``false`` is unset; and the rollback copy's size."""
        named = getattr(self, "resume_from_checkpoint", None)
        choice = named.strip().lower() if isinstance(named, str) else None
        if choice in ("true", "1", "yes"):
            self.resume, self.resume_from_checkpoint = True, None
        elif choice in ("false", "0", "no", ""):
            self.resume_from_checkpoint = None
        elif choice is not None:
            self.resume = True
        check(
            self.rollback_snapshot_max_bytes >= 0,
            "rollback_snapshot_max_bytes",
            self.rollback_snapshot_max_bytes,
            "must be >= 0 (0: no rollback copy)",
        )
