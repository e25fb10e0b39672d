"""A pool of verifier worker processes with a hard per-answer deadline.

Each worker (:func:`.verify_worker.worker_main`) checks one answer at a time
under its own SIGALRM timeout. The parent gives every answer a deadline of
``timeout + KILL_GRACE_S`` seconds from the moment it is sent; a worker that
has not replied by then (stuck in C code that a signal cannot interrupt, or
stopped) is killed and replaced, and the answer gets the status ``killed``.
A worker that dies (segfault, out of memory, killed from outside) is
replaced too, and the answer it held gets ``crashed``. Either way the caller
gets one status per answer and never waits longer than the deadline for one.

How workers start (``start_method``):

- ``"forkserver"`` (default): one verifier server,
  ``python -m contrastive_rlvr.rewards.verify_worker serve``, started with
  :class:`subprocess.Popen`, imports math-verify and sympy once and forks a
  warm worker per request, so a replacement costs milliseconds. The sockets
  to the workers are handed to it over a Unix socket (``SCM_RIGHTS``).
- ``"spawn"``: each worker is a fresh interpreter of the same module
  (one to a few seconds each: imports and warm-up), for systems without ``fork``.

Either way no process ever imports the user's ``__main__``: unlike
:mod:`multiprocessing`, whose workers re-run the main module (a script
without a main guard, ``python -m``, standard input, ``%run`` and
``torchrun`` break it, and a guarded script pays its imports per worker),
the children get the parent's ``sys.path`` and nothing else. The training
process is never forked either (unsafe once torch runs threads). The
measurements behind this choice are in docs/reliability.md.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import IO

from .status import CRASHED, KILLED, READY

logger = logging.getLogger(__name__)

START_METHODS: tuple[str, ...] = ("forkserver", "spawn")
# Run as a program by the children; the parent never imports it (nor sympy).
_WORKER_MODULE = f"{__package__}.verify_worker"
# Slack on top of the worker's own alarm before the parent kills it: covers
# pickling and the pipe round trip, far below a second on any machine.
KILL_GRACE_S = 0.5
# How long close() waits for workers and the server to exit before killing them.
_JOIN_S = 1.0
# How long a new process may take to start: the server (or a spawned worker)
# imports sympy and math-verify, seconds on a busy machine; a fork is
# milliseconds but gets the same allowance.
_START_S = 60.0
# How long one request to a running server (fork a worker, kill one) may take:
# milliseconds normally; past this the server counts as stuck and is replaced.
_REQUEST_S = 10.0
# Lines of the children's stderr quoted when one fails to start.
_TAIL_LINES = 15


def _child_env() -> dict[str, str]:
    """The environment of a child: ours, with our ``sys.path`` as its ``PYTHONPATH``.

    So the child finds this package and math-verify wherever the parent did
    (an editable install, ``sys.path`` edited by a script, a ``-m`` run from
    a source tree), without importing anything of the parent's own.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


class _ChildLog:
    """An anonymous file that every child writes its stdout and stderr to.

    Read back (with ``pread``, leaving the children's shared offset alone)
    only to quote the end of it in an error.
    """

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile()

    def tail(self, lines: int = _TAIL_LINES) -> str:
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, 8192), max(0, size - 8192))
        text = data.decode("utf-8", errors="replace").rstrip()
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self.file.close()


def _start_error(what: str, log: _ChildLog) -> RuntimeError:
    """An error that says what failed, ending with the children's last stderr lines."""
    tail = log.tail()
    last = tail.splitlines()[-1] if tail else "no output"
    body = f"\n--- verifier stderr, last lines ---\n{tail}" if tail else ""
    return RuntimeError(f"{what}: {last}{body}")


class ServerGone(RuntimeError):
    """The verifier server died or stopped answering (it is killed; a new one can start)."""


def _control_socketpair() -> tuple[socket.socket, socket.socket]:
    # Message boundaries where the system has them (Linux); requests and
    # replies are a few bytes, one at a time, so a stream socket works too.
    try:
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except (AttributeError, OSError):
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def _popen(args: list[str], fd: int, log: _ChildLog) -> subprocess.Popen:
    """``python -m <worker module> *args`` with socket ``fd`` passed on, output to ``log``."""
    command = [sys.executable, "-m", _WORKER_MODULE, *args]
    try:
        return subprocess.Popen(
            command,
            pass_fds=[fd],
            stdin=subprocess.DEVNULL,
            stdout=log.file,
            stderr=log.file,
            env=_child_env(),
        )
    except OSError as e:
        raise RuntimeError(f"could not run the verifier ({' '.join(command)}): {e}") from e


class _ForkServer:
    """The verifier server process and the control socket to it (see the module doc)."""

    def __init__(self, timeout: int, log: _ChildLog) -> None:
        self.log = log
        started = time.perf_counter()
        ours, theirs = _control_socketpair()
        try:
            self.process = _popen(
                ["serve", str(theirs.fileno()), str(timeout)], theirs.fileno(), log
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self.control.settimeout(_START_S)
        try:
            ready = self.control.recv(16) == b"R"
            reason = "exited"
        except TimeoutError:
            ready, reason = False, f"did not answer within {_START_S:.0f} s"
        # From now on a request waits at most _REQUEST_S: a server that is
        # stopped or stuck must not hang training.
        self.control.settimeout(_REQUEST_S)
        if not ready:
            self.close()
            raise _start_error(
                f"the verifier server ({sys.executable} -m {_WORKER_MODULE}) {reason} while "
                f"starting (exit code {self.process.returncode})",
                log,
            )
        #: seconds from Popen to the server's "ready" (imports and warm-up).
        self.start_seconds = time.perf_counter() - started

    def alive(self) -> bool:
        return self.process.poll() is None

    def _request(self, msg: bytes, fds: Sequence[int] = ()) -> bytes:
        try:
            socket.send_fds(self.control, [msg], list(fds))
            reply = self.control.recv(64)
            reason = "died"
        except TimeoutError:
            reply, reason = b"", f"did not answer within {_REQUEST_S:.0f} s"
        except OSError:
            reply, reason = b"", "died"
        if not reply:
            self.process.kill()  # stopped or stuck: make it dead, so that a new one starts
            code = self.process.wait()
            raise ServerGone(f"the verifier server {reason} (exit code {code})")
        return reply

    def spawn(self) -> tuple[int, Connection]:
        ours, theirs = socket.socketpair()
        try:
            reply = self._request(b"F", [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return int(reply.split()[1]), Connection(ours.detach())

    def reap(self, pid: int) -> str:
        """Kill worker ``pid`` if it still runs; its exit code as the server saw it."""
        if not self.alive():
            return "unknown (server gone)"
        try:
            return self._request(b"K %d" % pid).split()[1].decode()
        except ServerGone:
            return "unknown (server gone)"

    def close(self) -> None:
        self.control.close()  # end of file: the server kills its workers and exits
        try:
            self.process.wait(_JOIN_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Spawner:
    """Workers as fresh interpreters (``start_method="spawn"``): no server, no fork."""

    def __init__(self, timeout: int, log: _ChildLog) -> None:
        self.timeout = timeout
        self.log = log
        self.start_seconds = 0.0
        self.processes: dict[int, subprocess.Popen] = {}

    def alive(self) -> bool:
        return True

    def spawn(self) -> tuple[int, Connection]:
        ours, theirs = socket.socketpair()
        try:
            args = ["worker", str(theirs.fileno()), str(self.timeout)]
            process = _popen(args, theirs.fileno(), self.log)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.processes[process.pid] = process
        return process.pid, Connection(ours.detach())

    def reap(self, pid: int) -> str:
        process = self.processes.pop(pid, None)
        if process is None:
            return "unknown"
        process.kill()  # a no-op on a process that has exited but is not yet reaped
        return str(process.wait())

    def close(self) -> None:
        for pid in list(self.processes):
            self.reap(pid)


@dataclass
class _Worker:
    pid: int
    conn: Connection
    task: int | None = None  # index of the answer it is checking
    deadline: float = 0.0  # time.monotonic() after which it is killed


@dataclass
class _Processes:
    """What the pool owns, apart from the pool object so that a finalizer can stop it."""

    workers: list[_Worker] = field(default_factory=list)
    launcher: _ForkServer | _Spawner | None = None
    log: _ChildLog | None = None
    owner: int = field(default_factory=os.getpid)

    def stop(self) -> None:
        """Ask every worker to exit, kill the ones that do not, stop the server."""
        if os.getpid() != self.owner:
            # A fork of the process that started the pool (e.g. a data loader
            # worker) exiting: the workers are its parent's, leave them be.
            return
        for w in self.workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        # A worker that exits closes its socket: wait for those ends of file.
        pending = [w.conn for w in self.workers if not w.conn.closed]
        end = time.monotonic() + _JOIN_S
        while pending and time.monotonic() < end:
            for conn in wait(pending, timeout=max(0.0, end - time.monotonic())):
                try:
                    conn.recv()  # a stray reply; EOF is the usual case
                except (EOFError, OSError):
                    pending.remove(conn)
        for w in self.workers:
            if self.launcher is not None:
                self.launcher.reap(w.pid)
            w.conn.close()
        self.workers.clear()
        if self.launcher is not None:
            self.launcher.close()
            self.launcher = None
        if self.log is not None:
            self.log.close()
            self.log = None


class VerifierPool:
    """``workers`` verifier processes; :meth:`check` maps (gold, pred) pairs to statuses.

    ``events`` counts ``killed`` (hung worker killed at the deadline),
    ``crashed`` (worker died), ``restarts`` (workers started to replace one
    of these), ``interrupted`` (busy workers replaced after an interrupted
    call) and ``server_restarts`` (verifier server found dead and started
    again). ``start_seconds`` holds the start-up time of every worker
    started, replacements included, from the request to its "ready"
    message. Not thread-safe on its own; :class:`MathVerifyReward`
    serialises calls with a lock.
    """

    def __init__(self, workers: int, timeout: int, *, start_method: str = "forkserver") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout < 1 or int(timeout) != timeout:
            raise ValueError(f"timeout must be a whole number of seconds >= 1, got {timeout!r}")
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
        self.n_workers = workers
        self.timeout = int(timeout)
        self.start_method = start_method
        self.events: Counter[str] = Counter()
        self.start_seconds: list[float] = []
        self._procs = _Processes()
        self._finalizer = weakref.finalize(self, self._procs.stop)

    @property
    def _workers(self) -> list[_Worker]:
        return self._procs.workers

    @property
    def server_start_seconds(self) -> float | None:
        """Seconds the verifier server took to start (None before it did, or with spawn)."""
        launcher = self._procs.launcher
        return launcher.start_seconds if isinstance(launcher, _ForkServer) else None

    def _launcher(self) -> _ForkServer | _Spawner:
        procs = self._procs
        if procs.log is None:
            procs.log = _ChildLog()
        if procs.launcher is not None and not procs.launcher.alive():
            # Killed from outside (OOM killer, a stray kill): its workers died
            # with it (see verify_worker._die_with_parent) and are replaced,
            # as crashed, by forks of a new server.
            logger.warning("the verifier server is gone; starting a new one")
            procs.launcher.close()
            procs.launcher = None
            self.events["server_restarts"] += 1
        if procs.launcher is None:
            kind = _ForkServer if self.start_method == "forkserver" else _Spawner
            procs.launcher = kind(self.timeout, procs.log)
        return procs.launcher

    def _spawn(self) -> _Worker:
        launcher = self._launcher()
        started = time.perf_counter()
        try:
            pid, conn = launcher.spawn()
        except ServerGone as e:
            # Died (or stopped answering, and was killed) since the last
            # request: once, start a new server and ask it instead.
            logger.warning("%s; starting a new one", e)
            launcher = self._launcher()
            try:
                pid, conn = launcher.spawn()
            except ServerGone as again:
                raise _start_error(f"{again}, twice in a row", self._procs.log) from again
        # Wait for the worker's "ready": answer deadlines then measure checking
        # only, never the start-up of a process on a loaded machine.
        try:
            ready = conn.poll(_START_S) and conn.recv() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            exit_code = launcher.reap(pid)
            conn.close()
            raise _start_error(
                f"verifier worker {pid} did not start within {_START_S:.0f} s "
                f"(exit code {exit_code})",
                self._procs.log,
            )
        self.start_seconds.append(time.perf_counter() - started)
        return _Worker(pid, conn)

    def _replace(self, k: int, event: str) -> None:
        old = self._workers[k]
        exit_code = self._procs.launcher.reap(old.pid)
        old.conn.close()
        self.events[event] += 1
        self.events["restarts"] += 1
        self._workers[k] = self._spawn()
        log = logger.warning if event == CRASHED else logger.info
        log(
            "verifier worker %d %s (exit code %s); replaced in %.3f s",
            old.pid,
            event,
            exit_code,
            self.start_seconds[-1],
        )

    def start(self) -> None:
        """Start the workers (done lazily by :meth:`check`)."""
        launcher = self._procs.launcher
        if launcher is not None and not launcher.alive():
            # Their server died, and they with it: replace them now rather than
            # lose the next answers sent to them.
            for k in range(len(self._workers)):
                self._replace(k, CRASHED)
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers (tests kill them to check replacement)."""
        return [w.pid for w in self._workers]

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
            # An idle worker has nothing to say: a readable socket is its end of file.
            if self._workers[k].conn.poll(0):
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
        """Stop all workers and the server; :meth:`check` starts new ones if called again."""
        self._procs.stop()
