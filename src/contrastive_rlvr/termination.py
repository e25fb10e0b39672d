"""SIGTERM behaves as Ctrl-C.

SLURM, Kubernetes and ``timeout`` end a job with SIGTERM, whose default action kills the
process at once: a checkpoint being written is left half written and nothing says which
checkpoint to continue from. Under :func:`sigterm_as_sigint` a SIGTERM goes to whatever
handles SIGINT at that moment, so it gets Ctrl-C's treatment everywhere: outside a
checkpoint write a ``KeyboardInterrupt`` (the CLI prints the command that continues the
run and exits 130), inside one the write is finished first
(:func:`~contrastive_rlvr.trainer.interrupts.held_interrupts`). This module imports
nothing heavy, so any process can use it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


def _as_sigint(signum: int, frame: Any) -> None:
    """SIGTERM's handler: do what SIGINT's handler of the moment does. SIGINT ignored (a
    job started in the background with ``&`` or ``nohup`` inherits that) never makes
    SIGTERM ignored: it then stops the command as Ctrl-C would."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """Within the block, SIGTERM behaves as Ctrl-C; main thread only (signal handlers live
    there), the previous handler restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _as_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
