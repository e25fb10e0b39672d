"""A pool of verifier worker processes with a hard per-answer deadline.

Each worker (:func:`.verify_worker.worker_main`) checks one answer at a time
under its own SIGALRM timeout. The parent gives every answer a deadline of
``timeout + KILL_GRACE_S`` seconds from the moment it is sent; a worker that
has not replied by then (stuck in C code that a signal cannot interrupt, or
stopped) is killed and replaced, and the answer gets the status ``killed``.
A worker that dies (segfault, out of memory, killed from outside) is
replaced too, and the answer it held gets ``crashed``. Either way the caller
gets one status per answer and never waits longer than the deadline for one.

Workers are started with ``forkserver`` (a fork of a clean server process
that has already imported math-verify and sympy), so a replacement costs
milliseconds rather than the seconds of a fresh interpreter; ``fork`` from a
parent that runs torch threads is unsafe, hence not the default.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import weakref
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from .status import CRASHED, KILLED, READY

# The worker's module: imported by the fork server (preload) and the workers,
# not by the parent, which thus never imports sympy.
_WORKER_MODULE = f"{__package__}.verify_worker"
# Slack on top of the worker's own alarm before the parent kills it: covers
# pickling and the pipe round trip, far below a second on any machine.
KILL_GRACE_S = 0.5
# How long close() waits for a worker to exit on its own before killing it.
_JOIN_S = 1.0
# How long a new worker may take to start (the first one also starts the fork
# server, which imports sympy and math-verify: seconds on a busy machine).
_START_S = 60.0


def _worker_entry(conn: Connection, timeout: int) -> None:
    # Imported here, in the worker (a no-op after the fork server's preload).
    from .verify_worker import worker_main

    worker_main(conn, timeout)


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    task: int | None = None  # index of the answer it is checking
    deadline: float = 0.0  # time.monotonic() after which it is killed


def _stop(workers: list[_Worker]) -> None:
    """Ask every worker to exit, then kill the ones that do not (also run at interpreter exit)."""
    for w in workers:
        try:
            w.conn.send(None)
        except (OSError, ValueError):
            pass
    for w in workers:
        w.process.join(_JOIN_S)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(_JOIN_S)
        w.conn.close()
    workers.clear()


class VerifierPool:
    """``workers`` verifier processes; :meth:`check` maps (gold, pred) pairs to statuses.

    ``events`` counts ``killed`` (hung worker killed at the deadline),
    ``crashed`` (worker died) and ``restarts`` (workers started to replace
    one of these). Not thread-safe on its own; :class:`MathVerifyReward`
    serialises calls with a lock.
    """

    def __init__(self, workers: int, timeout: int, *, start_method: str = "forkserver") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout < 1 or int(timeout) != timeout:
            raise ValueError(f"timeout must be a whole number of seconds >= 1, got {timeout!r}")
        if start_method not in mp.get_all_start_methods():
            start_method = "spawn"
        self.n_workers = workers
        self.timeout = int(timeout)
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            # Takes effect when this interpreter's fork server first starts.
            self._ctx.set_forkserver_preload([_WORKER_MODULE])
        self._workers: list[_Worker] = []
        self.events: Counter[str] = Counter()
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_entry, args=(child_conn, self.timeout), daemon=True, name="verifier"
        )
        process.start()
        # Drop our copy of the child's end so the child's death shows as EOF.
        child_conn.close()
        # Wait for the worker's "ready": answer deadlines then measure checking
        # only, never the start-up of a process on a loaded machine.
        try:
            ready = parent_conn.poll(_START_S) and parent_conn.recv() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            process.kill()
            parent_conn.close()
            raise RuntimeError(
                f"a verifier worker did not start within {_START_S:.0f} s (exit code "
                f"{process.exitcode}); check that `import math_verify` works in this environment"
            )
        return _Worker(process, parent_conn)

    def _replace(self, k: int, event: str) -> None:
        old = self._workers[k]
        if old.process.is_alive():
            old.process.kill()
        old.process.join(_JOIN_S)
        old.conn.close()
        self.events[event] += 1
        self.events["restarts"] += 1
        self._workers[k] = self._spawn()

    def start(self) -> None:
        """Start the workers (done lazily by :meth:`check`)."""
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the current workers (tests kill them to check replacement)."""
        return [w.process.pid for w in self._workers]

    def check(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """One status per ``(gold, pred)``, each within ``timeout + KILL_GRACE_S`` of dispatch."""
        self.start()
        results: list[str | None] = [None] * len(pairs)
        pending = deque(range(len(pairs)))
        try:
            while pending or any(w.task is not None for w in self._workers):
                self._dispatch(pairs, pending)
                self._collect(results)
        except BaseException:
            # Interrupted (e.g. Ctrl-C): a busy worker's late reply would be
            # taken for an answer of the next call, so replace busy workers.
            for k, w in enumerate(self._workers):
                if w.task is not None:
                    self._replace(k, "interrupted")
            raise
        return [r if r is not None else CRASHED for r in results]  # every slot is set

    def _dispatch(self, pairs: Sequence[tuple[str, str]], pending: deque[int]) -> None:
        for k in range(len(self._workers)):
            if not pending:
                return
            if self._workers[k].task is not None:
                continue
            if not self._workers[k].process.is_alive():
                self._replace(k, CRASHED)  # died while idle: no answer lost
            i = pending.popleft()
            w = self._workers[k]
            try:
                w.conn.send((i, *pairs[i]))
            except (BrokenPipeError, OSError):
                pending.appendleft(i)
                self._replace(k, CRASHED)
                continue
            w.task, w.deadline = i, time.monotonic() + self.timeout + KILL_GRACE_S

    def _collect(self, results: list[str | None]) -> None:
        busy = [k for k, w in enumerate(self._workers) if w.task is not None]
        if not busy:
            return
        wait_s = max(0.0, min(self._workers[k].deadline for k in busy) - time.monotonic())
        ready = set(wait([self._workers[k].conn for k in busy], timeout=wait_s))
        for k in busy:
            w = self._workers[k]
            if w.conn in ready:
                try:
                    task_id, status = w.conn.recv()
                except (EOFError, OSError):
                    results[w.task] = CRASHED
                    self._replace(k, CRASHED)
                    continue
                results[task_id] = status
                w.task = None
            elif time.monotonic() >= w.deadline:
                results[w.task] = KILLED
                self._replace(k, KILLED)

    def close(self) -> None:
        """Stop all workers; the pool restarts them if :meth:`check` is called again."""
        _stop(self._workers)
