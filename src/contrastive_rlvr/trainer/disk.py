"""What a run leaves on disk, stated: each checkpoint's size when it is written (logged)
and the output folder's at the end (printed by ``train``), with the options that keep
less. A 2-step SmolLM2-135M run wrote 2.1 GB without a word: a checkpoint holds the
float32 weights (0.54 GB) and the Adam state (twice that), then the final model again."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

#: Files of a checkpoint that only a resume reads (optimizer, scheduler, RNG, scaler).
_RESUME_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state")


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (links not followed)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def human(n: int) -> str:
    """``1.62 GB``, ``540 MB``, ``12 kB`` (powers of 1000, as disks are sold)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def checkpoint_sizes(folder: Path) -> tuple[int, int]:
    """``(total, resume state)`` bytes of one checkpoint folder."""
    total = folder_bytes(folder)
    state = sum(
        p.stat().st_size
        for p in folder.iterdir()
        if p.is_file() and p.name.startswith(_RESUME_STATE)
    )
    return total, state


def disk_summary(output_dir: str | Path) -> str:
    """One line: the output folder's size, each checkpoint's (and how much of it is
    resume state), and what keeps less."""
    out = Path(output_dir)
    if not out.is_dir():
        return f"{out}: nothing on disk"
    checkpoints = sorted(p for p in out.glob("checkpoint-*") if p.is_dir())
    parts = []
    for ckpt in checkpoints:
        total, state = checkpoint_sizes(ckpt)
        parts.append(f"{ckpt.name} {human(total)} ({human(state)} of it optimizer/resume state)")
    line = f"{out}: {human(folder_bytes(out))} on disk"
    if parts:
        line += (
            f"; {', '.join(parts)}. save_total_limit=N keeps the newest N checkpoints, "
            "save_only_model=true drops the optimizer state (no resume then), "
            "save_strategy=no writes none"
        )
    return line


class CheckpointSizes(TrainerCallback):
    """Logs each checkpoint's size as it is written (INFO; ``--log_level info``)."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            total, resume_state = checkpoint_sizes(folder)
            logger.info(
                "%s: %s written (%s of it optimizer/resume state)",
                folder.name,
                human(total),
                human(resume_state),
            )
