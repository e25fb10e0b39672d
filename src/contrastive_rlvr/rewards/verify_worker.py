"""What runs inside a verifier worker process: math-verify under a SIGALRM timeout.

math-verify times out with ``signal.alarm``, which only works in a process's
main thread, and sympy can spend unbounded time on answers such as
``9^{9^{9^9}}``. So each answer is checked in a worker process's main thread
under one alarm for the whole check (parse gold, parse prediction, compare);
the parent (:mod:`.pool`) additionally kills a worker that does not answer
in time, for code that cannot be interrupted by a signal.

Both strings are parsed wrapped in ``\\boxed{}``, so a gold ``\\text{(C)}``
and a predicted ``C`` go through the same LaTeX extraction; ``verify`` gets
the gold first, as math-verify's asymmetric rules expect.
"""

from __future__ import annotations

import logging
import os
import signal
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
    # print their own tracebacks. math-verify logs every timeout at WARNING
    # with the whole expression (100 kB strings), so silence it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
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
    os._exit(0)


def _warm_up() -> None:
    """Parse and compare once, so that lazy parser set-up (about 0.5 s) is done here.

    Runs when the module is imported, i.e. once in the fork server, whose
    forks (every worker and every replacement) then start warm; otherwise a
    fresh worker's first answer could use up much of its timeout on set-up.
    """
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    try:
        check_answer("\\frac{1}{2}", "(0.5, x^2 + \\sqrt{2})", 5, {})
    except Exception:
        pass  # warming up is an optimisation only


_warm_up()
