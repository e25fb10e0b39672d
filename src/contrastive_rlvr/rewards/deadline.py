"""A deadline on one call of a reward function: past it the call stops with an error.

A user's reward function may wait forever (a lock, a socket with no timeout, a
subprocess that never ends); without a deadline the run would hang without a word.
:func:`call_with_deadline` runs the call in the calling thread, as before (a function
that uses ``signal.alarm``, as math-verify's own timeouts do, keeps working), with a
watchdog thread beside it:

- at the deadline the watchdog sends :data:`DEADLINE_SIGNAL` to the calling thread
  (the main thread: only there does Python run signal handlers). The handler raises
  :class:`_Interrupt`, a ``BaseException`` so that the function's own
  ``except Exception`` does not swallow it; a blocking system call (sleep, a lock, a
  read) is interrupted by the signal, so the error comes at once. A signal that is not
  the watchdog's is passed on to the handler that was there before;
- a call that returns after its deadline (it swallowed the interrupt, or was in code
  the signal could not stop) raises :class:`DeadlineExceeded` all the same;
- a call that does not come back within :data:`HARD_EXIT_GRACE_S` more seconds (stuck in
  C code that retries through signals, or called off the main thread, where no signal
  handler runs) cannot be stopped from Python: the watchdog writes one ``error:`` line
  naming the function to stderr and ends the process with exit code
  :data:`HARD_EXIT_CODE`, rather than leave it hanging.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: What the watchdog sends the calling thread at the deadline (SIGALRM is left to the
#: functions, which use it for their own timeouts).
DEADLINE_SIGNAL = signal.SIGUSR2
#: Seconds after the deadline before a call that did not come back ends the process.
HARD_EXIT_GRACE_S = 30.0
HARD_EXIT_CODE = 1


class DeadlineExceeded(Exception):
    """The call ran past its deadline (``seconds``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past its deadline of {seconds:g} s")
        self.seconds = seconds


class _Interrupt(BaseException):
    """Raised inside the call by the deadline signal's handler."""


class _Call:
    def __init__(self) -> None:
        self.running = True
        self.expired = False
        self.previous: Any = None


def call_with_deadline(fn: Callable[[], T], seconds: float | None, *, label: str = "the call") -> T:
    """``fn()``, stopped with :class:`DeadlineExceeded` when it takes more than ``seconds``
    (None or <= 0: no deadline); see the module docstring. ``label`` names the function
    in the line written before a forced exit."""
    if not seconds or seconds <= 0:
        return fn()
    call = _Call()
    finished = threading.Event()
    on_main = threading.current_thread() is threading.main_thread()
    target = threading.get_ident()

    def handler(signum: int, frame: Any) -> None:
        if call.running and call.expired:
            raise _Interrupt
        _pass_on(call.previous, signum, frame)

    def watch() -> None:
        if finished.wait(seconds):
            return
        call.expired = True
        if on_main:
            signal.pthread_kill(target, DEADLINE_SIGNAL)
        if finished.wait(HARD_EXIT_GRACE_S):
            return
        os.write(
            2,
            (
                f"error: {label} ran past its deadline of {seconds:g} s and did not stop "
                f"when interrupted ({HARD_EXIT_GRACE_S:g} s more); ending the process\n"
            ).encode(),
        )
        os._exit(HARD_EXIT_CODE)

    if on_main:
        call.previous = signal.signal(DEADLINE_SIGNAL, handler)
    watchdog = threading.Thread(target=watch, name="reward-deadline", daemon=True)
    watchdog.start()
    interrupted = False
    try:
        try:
            result = fn()
        finally:
            call.running = False  # from here on the handler raises nothing
    except _Interrupt:
        interrupted = True
    finally:
        finished.set()
        if on_main:
            previous = call.previous
            signal.signal(DEADLINE_SIGNAL, signal.SIG_DFL if previous is None else previous)
    if interrupted or call.expired:
        raise DeadlineExceeded(seconds)
    return result


def _pass_on(previous: Any, signum: int, frame: Any) -> None:
    """A deadline signal that is not the watchdog's: what the handler before would do."""
    if callable(previous):
        previous(signum, frame)
    elif previous in (signal.SIG_DFL, None):
        # The default action (SIGUSR2: end the process), as if no handler were set.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
