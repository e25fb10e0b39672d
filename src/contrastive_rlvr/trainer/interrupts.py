"""Ctrl-C during a checkpoint write, and the command that continues an interrupted run.

A checkpoint is several files (weights, optimizer, scheduler, RNG, trainer state) written
one after another; for a 135M-parameter model that takes seconds, and a Ctrl-C in that
window used to leave a checkpoint without some of them, which a resume must skip (and,
the only checkpoint, refuse). :class:`WholeCheckpoints` makes the write finish first:
the first Ctrl-C during it is held until the checkpoint is whole, then raised; a second
Ctrl-C abandons the checkpoint (its folder removed, so no half-written checkpoint stays)
and stops at once. Outside checkpoint writes Ctrl-C stops as before.

SIGTERM (what SLURM, Kubernetes and ``timeout`` send) is Ctrl-C: under
:func:`~contrastive_rlvr.termination.sigterm_as_sigint` (every CLI command runs under it)
it goes to whatever handles SIGINT at that moment, so a SIGTERM during a checkpoint write
is held the same way.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Options a continuing command drops (it sets ``--resume true`` itself).
_RESUME_OPTIONS = ("resume", "resume_from_checkpoint", "overwrite_output_dir")


@contextlib.contextmanager
def held_interrupts(folder: Path) -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block ends, then raise it; a second one raises at
    once, after removing ``folder`` when the block created it. Main thread only (signal
    handlers live there); elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    existed = folder.exists()
    presses = []

    def on_sigint(signum: int, frame: Any) -> None:
        presses.append(signum)
        if len(presses) == 1:
            print(
                f"interrupt: finishing the checkpoint being written ({folder.name}); press "
                "Ctrl-C again to abandon it",
                file=sys.stderr,
                flush=True,
            )
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except KeyboardInterrupt:
        if not existed and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
            print(f"interrupt: abandoned {folder.name} (removed)", file=sys.stderr, flush=True)
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if presses:
        raise KeyboardInterrupt


class WholeCheckpoints:
    """Trainer mixin: ``_save_checkpoint`` (transformers' private API, pinned) under
    :func:`held_interrupts`, so a Ctrl-C during it finishes or abandons the checkpoint."""

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = Path(self._get_output_dir(trial=trial))
        folder = folder / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        with held_interrupts(folder):
            super()._save_checkpoint(model, trial)


def _command(config_file: str | None, overrides: Sequence[str], *extra: str) -> str:
    """``contrastive-rlvr train`` with ``config_file``, ``overrides`` less any
    ``--resume``/``--resume_from_checkpoint``/``--overwrite_output_dir`` (with its value),
    then ``extra``."""
    kept: list[str] = []
    skip = False
    for i, arg in enumerate(overrides):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0].lstrip("-").replace("-", "_")
        if arg.startswith("--") and name in _RESUME_OPTIONS:
            nxt = overrides[i + 1] if i + 1 < len(overrides) else ""
            skip = "=" not in arg and nxt != "" and not nxt.startswith("--")
            continue
        kept.append(arg)
    words = ["contrastive-rlvr", "train"]
    if config_file:
        words += ["--config", str(config_file)]
    from ..redaction import redact_args  # the secrets rule: no token on the terminal

    return shlex.join([*words, *redact_args(kept), *extra])


def continue_command(config_file: str | None, overrides: Sequence[str]) -> str:
    """The ``train`` command line that continues the run of ``config_file`` and
    ``overrides`` from its newest complete checkpoint (``--resume true``)."""
    return _command(config_file, overrides, "--resume", "true")


def interrupted_note(
    output_dir: str | Path, config_file: str | None, overrides: Sequence[str]
) -> str:
    """What an interrupted ``train`` prints: the newest complete checkpoint and the
    command that continues from it, or, with none, the command that starts it again."""
    from ..checkpoints import newest_complete_checkpoint

    out = Path(output_dir)
    checkpoint, _ = newest_complete_checkpoint(out) if out.is_dir() else (None, [])
    if checkpoint is None:
        again = _command(config_file, overrides, "--overwrite_output_dir", "true")
        return f"interrupted before any complete checkpoint in {out}; start it again with: {again}"
    return (
        f"interrupted; {Path(checkpoint).name} in {out} is complete. Continue with: "
        f"{continue_command(config_file, overrides)}"
    )
