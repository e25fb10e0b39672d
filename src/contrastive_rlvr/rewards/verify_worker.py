"""What runs inside the verifier processes: math-verify under a SIGALRM timeout.

math-verify times out with ``signal.alarm``, which only works in a process's
main thread, and sympy can spend unbounded time on answers such as
``9^{9^{9^9}}``. So each answer is checked in a worker process's main thread
under one alarm for the whole check (parse gold, parse prediction, compare);
the parent (:mod:`.pool`) additionally kills a worker that does not answer
in time, for code that cannot be interrupted by a signal.

Both strings are parsed wrapped in ``\\boxed{}``, so a gold ``\\text{(C)}``
and a predicted ``C`` go through the same LaTeX extraction; ``verify`` gets
the gold first, as math-verify's asymmetric rules expect.

This module is run as a program, never imported by the training process
(which thus never imports sympy), and never imports the user's ``__main__``:

- ``python -m contrastive_rlvr.rewards.verify_worker serve FD TIMEOUT``: the
  verifier server. It imports math-verify, warms it up, then forks one worker
  per request on the control socket ``FD`` (see :func:`serve`), so every
  worker and every replacement starts warm in milliseconds.
- ``python -m contrastive_rlvr.rewards.verify_worker worker FD TIMEOUT``: one
  worker in a fresh interpreter, serving on socket ``FD`` (``start_method="spawn"``).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Connection

import math_verify

from .status import CORRECT, ERROR, GOLD_UNPARSABLE, READY, TIMEOUT, UNPARSABLE, WRONG

# Parsed gold answers kept per worker: one prompt's gold is checked against
# all G completions of its group, so parsing it once saves most of the work.
_GOLD_CACHE_SIZE = 4096


class AnswerTimeout(BaseException):
    """Raised by the alarm. A BaseException so math-verify's ``except Exception`` can't eat it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise AnswerTimeout


def _parse(text: str) -> list:
    # Timeouts off inside math-verify: our own alarm covers the whole check,
    # and a nested math-verify alarm would cancel it.
    return math_verify.parse("\\boxed{" + text + "}", parsing_timeout=None)


def check_answer(gold: str, pred: str, timeout: int, gold_cache: dict[str, list]) -> str:
    """One status for ``pred`` against ``gold`` within ``timeout`` seconds (main thread only)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        gold_parsed = gold_cache.get(gold)
        if gold_parsed is None:
            gold_parsed = _parse(gold)
            if len(gold_cache) >= _GOLD_CACHE_SIZE:
                gold_cache.clear()
            gold_cache[gold] = gold_parsed
        if not gold_parsed:
            return GOLD_UNPARSABLE
        pred_parsed = _parse(pred)
        if not pred_parsed:
            return UNPARSABLE
        ok = math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=None)
        return CORRECT if ok else WRONG
    except AnswerTimeout:
        return TIMEOUT
    except Exception:
        return ERROR
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def worker_main(conn: Connection, timeout: int) -> None:
    """Serve ``(task_id, gold, pred)`` requests on ``conn`` until it closes or sends None."""
    # Ctrl-C goes to the parent, which shuts the pool down; workers must not
    # print their own tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet_logs()
    gold_cache: dict[str, list] = {}
    conn.send(READY)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError, AnswerTimeout):
            break
        if request is None:
            break
        task_id, gold, pred = request
        try:
            status = check_answer(gold, pred, timeout, gold_cache)
        except AnswerTimeout:
            # The alarm fired between the check's end and its cancellation.
            status = TIMEOUT
        try:
            conn.send((task_id, status))
        except (BrokenPipeError, OSError):
            break
    conn.close()


def _quiet_logs() -> None:
    # math-verify logs every timeout at WARNING with the whole expression
    # (100 kB strings): silence it and its LaTeX parser.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)


def _warm_up() -> None:
    """Parse and compare once, so that lazy parser set-up (about 0.5 s) is done here.

    Runs once in the server before it forks any worker, so every worker and
    every replacement starts warm; otherwise a fresh worker's first answer
    could use up much of its timeout on set-up.
    """
    try:
        check_answer("\\frac{1}{2}", "(0.5, x^2 + \\sqrt{2})", 5, {})
    except Exception:
        pass  # warming up is an optimisation only


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this worker when the server that forked it exits.

    The server exits when the training process closes the pool or dies;
    without this, a worker stuck in C code (the case the parent's deadline
    is for) would outlive both. Safe here because the server is
    single-threaded (the signal follows the forking *thread*).
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # not Linux: the worker still exits on its socket's EOF when idle
    if os.getppid() != parent_pid:  # the server died before prctl took effect
        os._exit(0)


# From <linux/prctl.h>.
_PR_SET_PDEATHSIG = 1


def _reap(children: dict[int, int | None]) -> None:
    """Collect the exit status of every worker that has ended (no zombies pile up)."""
    for pid, status in children.items():
        if status is None:
            try:
                done, code = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                children[pid] = -1
                continue
            if done:
                children[pid] = os.waitstatus_to_exitcode(code)


def _kill(children: dict[int, int | None], pid: int) -> str:
    """Kill worker ``pid`` if it still runs; its exit code (negative: signal), or "unknown".

    Only the server kills its workers: it alone knows whether ``pid`` is
    still its unreaped child, so a pid that the system has meanwhile given
    to another process is never signalled.
    """
    if pid not in children:
        return "unknown"
    status = children.pop(pid)
    if status is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except ChildProcessError:
            return "unknown"
    return str(status)


def serve(control: socket.socket, timeout: int) -> None:
    """The verifier server: fork warm workers on request until ``control`` closes.

    Requests on the control socket (one at a time, each answered):

    - ``b"F"`` with one file descriptor: fork a worker serving on that
      socket; answer ``b"P <pid>"``.
    - ``b"K <pid>"``: kill that worker if it still runs and reap it; answer
      ``b"S <exit code>"`` (negative: the signal that ended it).

    End of file on ``control`` (the training process closed the pool or
    died) kills the remaining workers and ends the server.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _quiet_logs()
    _warm_up()
    # Objects made so far are never freed: keep the collector from touching
    # (and so copying) their pages in every forked worker.
    gc.freeze()
    server_pid = os.getpid()
    children: dict[int, int | None] = {}
    control.sendall(b"R")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 64, 1)
        except OSError:
            break
        if not msg:
            break
        _reap(children)
        if msg == b"F" and len(fds) == 1:
            pid = os.fork()
            if pid == 0:
                control.close()
                _die_with_parent(server_pid)
                code = 0
                try:
                    worker_main(Connection(fds[0]), timeout)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stderr.flush()
                    os._exit(code)  # never run the server's loop or exit handlers
            os.close(fds[0])
            children[pid] = None
            reply = b"P %d" % pid
        elif msg.startswith(b"K "):
            reply = b"S " + _kill(children, int(msg[2:])).encode()
        else:
            for fd in fds:
                os.close(fd)
            reply = b"E bad request " + msg[:20]
        try:
            control.sendall(reply)
        except OSError:
            break
    for pid in list(children):
        _kill(children, pid)


def main(argv: list[str] | None = None) -> None:
    """``serve FD TIMEOUT`` or ``worker FD TIMEOUT`` (see the module docstring)."""
    mode, fd, timeout = argv if argv is not None else sys.argv[1:]
    if mode == "serve":
        serve(socket.socket(fileno=int(fd)), int(timeout))
    elif mode == "worker":
        _warm_up()
        worker_main(Connection(int(fd)), int(timeout))
    else:
        raise SystemExit(f"unknown mode {mode!r}: expected 'serve' or 'worker'")


if __name__ == "__main__":
    main()
