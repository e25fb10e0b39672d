"""Whether a run can learn, and if not why: said during the run and in its summary.

A run can train to its last step, exit 0 and learn nothing. The causes met on a first
run with a user's own model and data (docs/first-run.md), each checked here:

- ``warmup``: the learning-rate warm-up lasts the whole run (``warmup_steps`` at or
  past ``max_steps``), so the rate never reaches ``learning_rate``; checked at the start.
- ``collapsed``: in most groups every completion got the same reward, so those groups
  give no advantage and no gradient; the reason is named (all wrong, e.g. all 0: the
  task is too hard or the reward does not read the answers; all correct, e.g. all 1:
  too easy), with the steps whose gradient norm was 0.
- ``truncated``: most completions were cut at ``max_completion_length``.
- ``no_answer``: no completion stated an answer the reward reads (a reward that counts
  its readings, :class:`~contrastive_rlvr.rewards.MathVerifyReward`): the message names
  the forms it reads and the options that widen them.

Each cause is logged as a warning once, at the first logged step where it holds over
the steps so far (the warm-up at the start), and :meth:`LearningSignal.summary` gives
all that held at the end, with ``learned_nothing`` when the rewards never told any
completions apart (every group collapsed at every step) or the gradient norm was 0 at
every step: the run's ``summary.json`` records it, and ``no_learning_signal='error'``
makes it an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

#: "Most": the share of groups (or completions) above which a cause holds.
MOST = 0.5
#: The schedulers whose learning rate ignores ``warmup_steps``.
_NO_WARMUP_SCHEDULES = ("constant", "reduce_lr_on_plateau")
#: Counts of a reward that says how many answers it read (MathVerifyReward.stats()).
_SCORED, _UNREAD = "reward/answers", ("reward/no_answer", "reward/unparsable", "reward/too_long")


def warmup_problem(args: Any, max_steps: int) -> str | None:
    """The ``warmup`` cause's message when the warm-up of ``args`` (TrainingArguments)
    lasts ``max_steps`` or more, else None."""
    schedule = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    if max_steps < 1 or schedule in _NO_WARMUP_SCHEDULES:
        return None
    warmup = args.get_warmup_steps(max_steps)
    if warmup < max_steps:
        return None
    lr = args.learning_rate
    # Linear warm-up: step k (0-based) runs at lr * k / warmup; the last at (max - 1)/warmup.
    last = lr * (max_steps - 1) / warmup
    course = f"rises from 0 to {last:.2g}" if last > 0 else "stays at 0"
    return (
        f"the learning-rate warm-up lasts the whole run: warmup_steps={args.warmup_steps:g} "
        f"is {_steps(warmup, 'step')} of max_steps={max_steps}, so the learning rate "
        f"{course} and never reaches learning_rate={lr:g}; set --warmup_steps 0, or "
        "a ratio below 1 (--warmup_steps 0.03: 3% of the run)"
    )


def _percent(x: float) -> str:
    return f"{100 * x:.0f}%"


@dataclass
class _Totals:
    """Sums over the logged steps so far."""

    steps: int = 0
    collapse: float = 0.0
    collapse_steps: int = 0
    all_collapsed_steps: int = 0
    wrong: float = 0.0
    correct: float = 0.0
    reasons_seen: bool = False
    clipped: float = 0.0
    clipped_steps: int = 0
    grad_steps: int = 0
    zero_grad_steps: int = 0
    scored: dict[str, float] = field(default_factory=dict)  # reward name -> completions
    read: dict[str, float] = field(default_factory=dict)  # reward name -> answers read


class LearningSignal(TrainerCallback):
    """Watches a run's logged metrics for the causes of a run that learns nothing (module
    doc): a warning once per cause while the run goes, and :meth:`summary` at its end.

    Args:
        trainer: the trainer (its ``reward_funcs`` and ``reward_func_names``, its
            ``accelerator`` to sum the rewards' counts over processes, its args).
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.totals = _Totals()
        self.causes: dict[str, str] = {}
        self._warned: set[str] = set()
        self._baseline: dict[str, tuple[float, float]] = {}
        self._step_counts: dict[str, tuple[float, float]] = {}

    # ------------------------------------------------------------------ reward counts

    def _readers(self) -> list[tuple[str, Any]]:
        """(name, reward) of each reward function that counts the answers it read."""
        names = getattr(self.trainer, "reward_func_names", [])
        out = []
        for name, fn in zip(names, getattr(self.trainer, "reward_funcs", []), strict=False):
            stats = getattr(fn, "stats", None)
            if callable(stats) and callable(getattr(fn, "reading_options", None)):
                out.append((name, fn))
        return out

    def _counts(self) -> dict[str, tuple[float, float]]:
        """name -> (completions scored, answers read) since each reward was made, summed
        over processes (every process calls this at the same point)."""
        local: dict[str, tuple[float, float]] = {}
        for name, fn in self._readers():
            stats: Mapping[str, float] = fn.stats()
            scored = float(stats.get(_SCORED, 0.0))
            unread = sum(float(stats.get(k, 0.0)) for k in _UNREAD)
            local[name] = (scored, scored - unread)
        accelerator = getattr(self.trainer, "accelerator", None)
        if local and accelerator is not None and accelerator.num_processes > 1:
            import torch

            keys = sorted(local)
            flat = torch.tensor([v for k in keys for v in local[k]], device=accelerator.device)
            summed = accelerator.reduce(flat, reduction="sum").tolist()
            local = {k: (summed[2 * i], summed[2 * i + 1]) for i, k in enumerate(keys)}
        return local

    # ------------------------------------------------------------------ callbacks

    def on_train_begin(self, args, state, control, **kwargs):
        self._baseline = self._counts()  # the held-out evaluation before RL scored some
        problem = warmup_problem(args, state.max_steps)
        if problem is not None:
            self._hold("warmup", problem, state)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        now = self._counts()
        self._step_counts = {
            name: (
                scored - self._baseline.get(name, (0.0, 0.0))[0],
                read - self._baseline.get(name, (0.0, 0.0))[1],
            )
            for name, (scored, read) in now.items()
        }
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or any(k.startswith("eval_") for k in logs):
            return control
        self.observe(logs, args)
        for name, message in self.current_causes(args).items():
            self._hold(name, message, state)
        return control

    # ------------------------------------------------------------------ the checks

    def observe(self, logs: Mapping[str, Any], args: Any = None) -> None:
        """Add one logged step's metrics (and the rewards' counts so far) to the totals."""
        t = self.totals
        t.steps += 1
        collapse = _number(logs, "adv/collapse_rate", "frac_reward_zero_std")
        if collapse is not None:
            t.collapse += collapse
            t.collapse_steps += 1
            t.all_collapsed_steps += collapse >= 1.0
        wrong, correct = (
            _number(logs, "adv/collapse_wrong_rate"),
            _number(logs, "adv/collapse_correct_rate"),
        )
        if wrong is not None and correct is not None:
            t.wrong += wrong
            t.correct += correct
            t.reasons_seen = True
        clipped = _number(logs, "completions/clipped_ratio")
        if clipped is not None:
            t.clipped += clipped
            t.clipped_steps += 1
        grad = _number(logs, "grad_norm")
        if grad is not None:
            t.grad_steps += 1
            t.zero_grad_steps += grad == 0.0
        for name, (scored, read) in self._step_counts.items():
            t.scored[name], t.read[name] = scored, read

    def current_causes(self, args: Any) -> dict[str, str]:
        """The causes that hold over the logged steps so far (module doc), with messages."""
        t, causes = self.totals, {}
        if t.collapse_steps and t.collapse / t.collapse_steps > MOST:
            causes["collapsed"] = self._collapse_message()
        if t.clipped_steps and t.clipped / t.clipped_steps > MOST:
            length = getattr(args, "max_completion_length", None)
            causes["truncated"] = (
                f"most completions were cut at max_completion_length={length}: "
                f"{_percent(t.clipped / t.clipped_steps)} over {_steps(t.clipped_steps)}; a cut "
                "completion rarely states its answer: raise max_completion_length, or ask "
                "the model for shorter answers (a lower temperature rambles less)"
            )
        for name, reward in self._readers():
            scored, read = t.scored.get(name, 0.0), t.read.get(name, 0.0)
            if scored > 0 and read <= 0:
                causes["no_answer"] = self._no_answer_message(name, reward, scored)
        return causes

    def _collapse_message(self) -> str:
        t = self.totals
        share = t.collapse / t.collapse_steps
        text = (
            f"most groups had all rewards equal, so they give no advantage and no gradient: "
            f"{_percent(share)} of groups over {_steps(t.collapse_steps)}"
        )
        hint = ""
        if t.reasons_seen:
            wrong, correct = t.wrong / t.collapse_steps, t.correct / t.collapse_steps
            text += (
                f" (all wrong, e.g. all 0: {_percent(wrong)}; all correct, e.g. all 1: "
                f"{_percent(correct)})"
            )
            if wrong >= correct:
                hint = (
                    "; all wrong: the task is too hard for the model, or the reward does "
                    f"not read its answers ({self._where_samples()})"
                )
            else:
                hint = "; all correct: the task is too easy for the model"
        if t.grad_steps:
            text += f"; gradient norm 0 at {t.zero_grad_steps} of {_steps(t.grad_steps)}"
        return text + hint

    def _where_samples(self) -> str:
        """Where the user can read what the model wrote: the held-out samples that
        ``contrastive_rlvr.train`` writes, else (a script's own trainer writes none) TRL's
        printed completions."""
        if getattr(self.trainer, "writes_heldout_samples", False):
            return "the held-out samples in samples/ show what it wrote and what was read"
        return (
            "log_completions=True prints sampled completions with their rewards; "
            "contrastive_rlvr.train also writes held-out samples to samples/"
        )

    def _no_answer_message(self, name: str, reward: Any, scored: float) -> str:
        from ..rewards import AnswerReading

        reading = AnswerReading(**reward.reading_options())
        widen = reading.how_to_widen()
        return (
            f"no completion of the {scored:.0f} scored so far states an answer the reward "
            f"{name!r} reads, so every one scores 0: it reads {reading.formats()}"
            + (f"; {widen}" if widen else "")
        )

    def learned_nothing(self) -> str | None:
        """Why the run learned nothing at all, or None: the rewards never told completions
        apart (every group collapsed at every logged step), or the gradient norm was 0 at
        every logged step."""
        t = self.totals
        if t.collapse_steps and t.all_collapsed_steps == t.collapse_steps:
            why = ""
            if t.reasons_seen:
                wrong, correct = t.wrong / t.collapse_steps, t.correct / t.collapse_steps
                why = (
                    f" (all wrong, e.g. all 0: {_percent(wrong)} of groups; all correct, "
                    f"e.g. all 1: {_percent(correct)})"
                )
            return (
                f"the rewards never told completions apart: every group's rewards were equal "
                f"at every one of the {_steps(t.collapse_steps)}{why}, so every advantage was "
                "0 and the run learned nothing"
            )
        if t.grad_steps and t.zero_grad_steps == t.grad_steps:
            return (
                f"the gradient norm was 0 at every one of the {_steps(t.grad_steps)}: the "
                "run learned nothing"
            )
        return None

    def summary(self, args: Any) -> dict[str, Any]:
        """What ``summary.json`` records: every cause that holds over the whole run (name
        -> message; the warm-up's from the start), ``held_earlier``: those warned during
        the run that no longer hold over all of it (the message of their warning), and
        ``learned_nothing`` (a message, or None)."""
        causes = {k: v for k, v in self.causes.items() if k == "warmup"}
        causes.update(self.current_causes(args))
        # What was warned during the run and no longer holds over all of it (a first step
        # cut short, answers unread until a later step): kept, as the warning said it.
        earlier = {k: v for k, v in self.causes.items() if k not in causes}
        return {
            "causes": causes,
            "held_earlier": earlier,
            "learned_nothing": self.learned_nothing(),
            "logged_steps": self.totals.steps,
        }

    def _hold(self, name: str, message: str, state: Any) -> None:
        self.causes[name] = message
        if name not in self._warned and getattr(state, "is_world_process_zero", True):
            self._warned.add(name)
            logger.warning("the run may learn nothing: %s", message)


def _number(logs: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = logs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
            return float(value)
    return None


def _steps(n: int, unit: str = "logged step") -> str:
    return f"{n} {unit}{'s' if n != 1 else ''}"
