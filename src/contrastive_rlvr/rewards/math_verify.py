"""Math answer correctness with math-verify, safe to run inside a training loop.

``MathVerifyReward`` extracts the final answer of each completion
(:func:`.extract.extract_answer`), then checks it against the gold answer
with ``math_verify.verify(gold, pred)`` (gold first) in a pool of worker
processes (:class:`.pool.VerifierPool`). The reward is 1.0 for a verified
answer and 0.0 otherwise; a pathological answer (``9^{9^{9^9}}``,
``(10^{10})!``, a 100 kB string) scores 0 after at most
``timeout + KILL_GRACE_S`` seconds, and the training step goes on.

Metrics (:meth:`MathVerifyReward.stats`, cumulative counts of completions
unless noted):

- ``reward/answers``: completions scored.
- ``reward/correct``: verified correct (the reward-1 count).
- ``reward/wrong``: parsed and compared, not equal.
- ``reward/no_answer``: no ``<answer>``, ``\\boxed{}``, ``Answer:`` line, "the answer
  is X" or (with the fallback) number found.
- ``reward/too_long``: extracted answer longer than ``max_answer_chars``, not checked.
- ``reward/unparsable``: math-verify found no expression in the extracted answer.
- ``reward/gold_unparsable``: the gold answer itself did not parse (a data problem).
- ``reward/timeouts``: the worker's alarm fired (``timeout`` seconds).
- ``reward/killed``: the worker did not answer by the deadline and was killed.
- ``reward/crashes``: the worker died while checking the answer.
- ``reward/errors``: math-verify raised an exception.
- ``reward/worker_restarts``: workers started to replace killed or dead ones.
- ``reward/worker_crashes``: workers found dead, busy or idle (counts processes, not answers).

Verifier counters (:meth:`MathVerifyReward.counters`): the trouble counts
above under stable ``verifier/...`` names, cumulative since the reward was
made and never reset (:meth:`~MathVerifyReward.reset_stats` leaves them), so
that a training run can log them every step
(:class:`.logging.VerifierCountersCallback`):

- ``verifier/timeouts``: answers whose worker alarm fired.
- ``verifier/killed``: answers whose worker missed the deadline and was killed.
- ``verifier/crashed``: answers whose worker died while checking them.
- ``verifier/errors``: answers on which math-verify raised.
- ``verifier/worker_restarts``: workers started to replace killed, dead or
  interrupted ones.
- ``verifier/worker_crashes``: worker processes found dead, busy or idle.
- ``verifier/server_restarts``: verifier servers found dead and started again.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import status as st
from .extract import completion_text, extract_answer, normalize_answer
from .pool import VerifierPool

# Statuses that mean "the completion gave no usable answer" (eval's unparsable count).
UNPARSED_STATUSES = frozenset({st.NO_ANSWER, st.TOO_LONG, st.UNPARSABLE})
# Status -> metric key. Every status a score can have appears here.
_METRIC_OF_STATUS = {
    st.CORRECT: "reward/correct",
    st.WRONG: "reward/wrong",
    st.NO_ANSWER: "reward/no_answer",
    st.TOO_LONG: "reward/too_long",
    st.UNPARSABLE: "reward/unparsable",
    st.GOLD_UNPARSABLE: "reward/gold_unparsable",
    st.TIMEOUT: "reward/timeouts",
    st.KILLED: "reward/killed",
    st.CRASHED: "reward/crashes",
    st.ERROR: "reward/errors",
}
#: The keys of :meth:`MathVerifyReward.counters`, in a fixed order.
COUNTER_KEYS: tuple[str, ...] = (
    "verifier/timeouts",
    "verifier/killed",
    "verifier/crashed",
    "verifier/errors",
    "verifier/worker_restarts",
    "verifier/worker_crashes",
    "verifier/server_restarts",
)
_COUNTER_OF_STATUS = {
    st.TIMEOUT: "verifier/timeouts",
    st.KILLED: "verifier/killed",
    st.CRASHED: "verifier/crashed",
    st.ERROR: "verifier/errors",
}


@dataclass(frozen=True)
class AnswerScore:
    """The outcome for one completion: ``reward`` (1.0 or 0.0), the extracted answer, a status."""

    reward: float
    answer: str | None
    status: str

    @property
    def unparsed(self) -> bool:
        """True when the completion gave no answer math-verify could read."""
        return self.status in UNPARSED_STATUSES


class MathVerifyReward:
    """Binary math-answer reward, callable as a TRL reward function.

    Args:
        timeout: seconds (whole) allowed for checking one answer.
        workers: verifier processes; checks of one call run in parallel across them.
        last_number_fallback: without ``<answer>`` or ``\\boxed{}``, use the
            completion's last number as its answer (GSM8K-style outputs).
        answer_line: without ``<answer>`` or ``\\boxed{}``, read the last
            ``Answer: X`` line (DAPO-Math-17k's format; :mod:`.extract`, step 3);
            False reads tags and boxes only.
        answer_phrase: then read the last "... answer is X" of the prose ("So, the
            final answer is 4."; :mod:`.extract`, step 4).
        max_answer_chars: longer extracted answers score 0 without being
            parsed (``reward/too_long``); None checks any length.
        start_method: how workers start: ``"forkserver"`` (forks of one warm
            verifier server, milliseconds each) or ``"spawn"`` (a fresh
            interpreter per worker, one to a few seconds each); neither imports
            the caller's ``__main__`` (:mod:`.pool`).

    ``reward(prompts, completions, answer=[...])`` returns one float per
    completion; completions may be strings or chat message lists. The pool
    starts on the first call and stops on :meth:`close`, on leaving a
    ``with`` block, or at interpreter exit.
    """

    #: Every answer is checked under its own deadline (``timeout``, then the pool kills the
    #: worker): the trainer's per-call ``reward_timeout`` is not applied on top.
    own_deadline = True

    def __init__(
        self,
        timeout: int = 3,
        workers: int = 2,
        last_number_fallback: bool = False,
        answer_line: bool = True,
        max_answer_chars: int | None = 1000,
        answer_phrase: bool = True,
        start_method: str = "forkserver",
    ) -> None:
        if max_answer_chars is not None and max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be >= 1 or None, got {max_answer_chars}")
        self.timeout = timeout
        self.workers = workers
        self.last_number_fallback = last_number_fallback
        self.answer_line = answer_line
        self.answer_phrase = answer_phrase
        self.max_answer_chars = max_answer_chars
        self.start_method = start_method
        # TRL names reward functions by __name__ (logged as rewards/<name>/mean).
        self.__name__ = "math_verify"
        self._pool = VerifierPool(workers, timeout, start_method=start_method)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()

    def _config(self) -> dict[str, Any]:
        return {
            "timeout": self.timeout,
            "workers": self.workers,
            "last_number_fallback": self.last_number_fallback,
            "answer_line": self.answer_line,
            "answer_phrase": self.answer_phrase,
            "max_answer_chars": self.max_answer_chars,
            "start_method": self.start_method,
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"MathVerifyReward({args})"

    # Pickling carries the configuration only; the copy starts its own pool.
    def __getstate__(self) -> dict[str, Any]:
        return self._config()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def extract(self, completion: str | Sequence[Mapping[str, Any]]) -> str | None:
        """The answer this reward would check for ``completion`` (None if it states none)."""
        text = completion_text(completion)
        return extract_answer(text, **self.reading_options())

    def reading_options(self) -> dict[str, bool]:
        """How this reward reads answers: :class:`.extract.AnswerReading`'s fields."""
        return {
            "answer_line": self.answer_line,
            "answer_phrase": self.answer_phrase,
            "last_number_fallback": self.last_number_fallback,
        }

    def score(
        self, completions: Sequence[str | Sequence[Mapping[str, Any]]], golds: Sequence[Any]
    ) -> list[AnswerScore]:
        """One :class:`AnswerScore` per completion against the gold answer at the same index."""
        if len(completions) != len(golds):
            raise ValueError(
                f"got {len(completions)} completions but {len(golds)} gold answers; "
                "pass one answer per completion (the 'answer' column)"
            )
        answers = [self.extract(c) for c in completions]
        gold_strs = [normalize_answer(g, field="answer") for g in golds]
        statuses: list[str | None] = [None] * len(answers)
        # Identical (gold, answer) pairs are common within a group: check each once.
        unique: dict[tuple[str, str], list[int]] = {}
        for i, (gold, ans) in enumerate(zip(gold_strs, answers, strict=True)):
            if ans is None:
                statuses[i] = st.NO_ANSWER
            elif self.max_answer_chars is not None and len(ans) > self.max_answer_chars:
                statuses[i] = st.TOO_LONG
            else:
                unique.setdefault((gold, ans), []).append(i)
        with self._lock:
            if unique:
                pairs = list(unique)
                events_before = self._pool.events.copy()
                for pair, status in zip(pairs, self._pool.check(pairs), strict=True):
                    for i in unique[pair]:
                        statuses[i] = status
                events = self._pool.events - events_before
                self._counts["reward/worker_restarts"] += events["restarts"]
                self._counts["reward/worker_crashes"] += events[st.CRASHED]
                self._counters["verifier/worker_restarts"] += events["restarts"]
                self._counters["verifier/worker_crashes"] += events[st.CRASHED]
                self._counters["verifier/server_restarts"] += events["server_restarts"]
            scores = [
                AnswerScore(1.0 if s == st.CORRECT else 0.0, a, s)
                for s, a in zip(statuses, answers, strict=True)
                if s is not None
            ]
            self._counts["reward/answers"] += len(scores)
            for s in scores:
                self._counts[_METRIC_OF_STATUS[s.status]] += 1
                if s.status in _COUNTER_OF_STATUS:
                    self._counters[_COUNTER_OF_STATUS[s.status]] += 1
        return scores

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[str | Sequence[Mapping[str, Any]]] | None = None,
        answer: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """TRL reward-function signature: one reward per completion."""
        if completions is None:
            raise ValueError("MathVerifyReward needs completions=[...]")
        if answer is None:
            raise ValueError(
                "MathVerifyReward needs the gold answers: the dataset must have an 'answer' "
                f"column (got columns {sorted(kwargs)})"
            )
        return [s.reward for s in self.score(completions, answer)]

    def stats(self) -> dict[str, float]:
        """Cumulative counts under the ``reward/...`` keys of the module docstring."""
        with self._lock:
            out = {key: 0.0 for key in _METRIC_OF_STATUS.values()}
            out["reward/answers"] = 0.0
            out["reward/worker_restarts"] = 0.0
            out["reward/worker_crashes"] = 0.0
            out.update({k: float(v) for k, v in self._counts.items()})
            return out

    def counters(self) -> dict[str, float]:
        """Cumulative verifier trouble counts under :data:`COUNTER_KEYS` (module docstring).

        Counted since the reward was made, across :meth:`close` and
        :meth:`reset_stats`; every key is present, zeros included.
        """
        with self._lock:
            return {key: float(self._counters[key]) for key in COUNTER_KEYS}

    @property
    def worker_start_seconds(self) -> list[float]:
        """Start-up time of every worker started so far, replacements included."""
        return list(self._pool.start_seconds)

    def reset_stats(self) -> None:
        """Zero the ``reward/...`` counts (e.g. after logging them); :meth:`counters` stay."""
        with self._lock:
            self._counts.clear()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (empty before the first call)."""
        return self._pool.pids

    def close(self) -> None:
        """Stop the worker processes; a later call starts new ones."""
        with self._lock:
            self._pool.close()

    def __enter__(self) -> MathVerifyReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
