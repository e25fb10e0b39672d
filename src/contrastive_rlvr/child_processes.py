"""Child processes that end with the process that started them.

A parent killed with SIGKILL (the OOM killer, ``kill -9``, a scheduler's hard stop)
runs no handler, so it cannot stop its children: they would go on as orphans,
writing into folders a rerun then reuses. On Linux a child asks the kernel for a
signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which is delivered however
the parent ends. The child sets it itself, first thing after it starts (no
``preexec_fn``, which is unsafe in a parent that runs threads), and then checks that
the parent is still the one that started it: a parent that died before the request
took effect would otherwise never signal.

The kernel sends the signal when the *thread* that started the child ends, not only
the process: a parent must start each child from a thread that outlives it (compare
starts and waits for each child in the same worker thread).
"""

from __future__ import annotations

import os
import signal
import sys

#: The environment variable that tells a child the pid of the process that started it.
PARENT_PID_ENV = "CONTRASTIVE_RLVR_PARENT_PID"
# From <linux/prctl.h>.
_PR_SET_PDEATHSIG = 1


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this process's pid as the parent a child checks for."""
    return {**env, PARENT_PID_ENV: str(os.getpid())}


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask for ``sig`` when the parent named by :data:`PARENT_PID_ENV` dies; exit at once
    (code 1) when it died already. Returns whether the request was made (False: no
    parent named, or not Linux, where a child relies on its parent stopping it)."""
    # Taken out, so that this process's own children do not check for the wrong parent.
    expected = os.environ.pop(PARENT_PID_ENV, None)
    if not expected or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if str(os.getppid()) != expected:
        # The parent ended between starting this process and the request above.
        os._exit(1)
    return True
