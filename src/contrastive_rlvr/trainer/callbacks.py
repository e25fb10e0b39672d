"""Callbacks: ``metrics.jsonl``, the first update's clip fraction and the progress bar."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from transformers import TrainerCallback

from ..metrics import (
    CLIP_FRACTION_KEYS,
    FIRST_UPDATE_CLIP_KEY,
    PROJECT_LOSS_METRIC_KEYS,
    TRL_LOSS_METRIC_KEYS,
)
from ..run_files import open_append
from .jsonl import keep_steps_up_to


def loss_metric_keys(cfg) -> dict[str, str]:
    """The loss-side metrics.jsonl keys of a run of ``cfg`` (an RLVRConfig): TRL's names
    when TRL's loss computes it, the project's otherwise (docs/metrics.md)."""
    from .trl_settings import uses_trl_loss

    return TRL_LOSS_METRIC_KEYS if uses_trl_loss(cfg) else PROJECT_LOSS_METRIC_KEYS


class RunCounters(TrainerCallback):
    """Puts running totals (``counters()``: skipped updates, rolled-back updates, ...) into
    the trainer's metrics after each optimizer step, so they go through the trainer's own
    log to every ``report_to`` integration, ``log_history`` and ``metrics.jsonl``, with
    the values after that step's update (the trainer's own log of them is taken at loss
    time, before it). ``metrics()`` returns the trainer's ``_metrics["train"]``."""

    def __init__(self, counters: Callable[[], dict[str, float]], metrics: Callable[[], dict]):
        self.counters, self.metrics = counters, metrics

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.metrics()
        for key, value in self.counters().items():
            metrics[key] = [float(value)]  # one value: GRPOTrainer.log's mean is itself
        return control


class LossForwardTokensLog(TrainerCallback):
    """Puts the tokens the loss's forwards processed in this optimizer step
    (``tokens/loss_rows_<kind>``, ``tokens/loss_forward_<kind>``: every micro-batch, summed
    over processes; :mod:`contrastive_rlvr.shared_forward.tokens`) into the trainer's
    metrics after the step, one value a step, so that a logged value is the mean over the
    steps since the last log. Every process calls it (the sum is an all-reduce)."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        acc = self.trainer.accelerator
        counts = self.trainer.prompt_sharing.tokens.take(
            lambda total: acc.reduce(total, reduction="sum"), device=acc.device
        )
        for key, value in counts.items():
            self.trainer._metrics["train"][key].append(value)
        return control


class MetricsJsonl(TrainerCallback):
    """Appends one JSON line per logged training step to ``output_dir/metrics.jsonl``,
    and one per held-out evaluation during training (TRL's ``eval_*`` keys, as TRL logs
    them).

    On resume, lines of steps after the checkpoint are dropped first, so the
    file never holds a step twice. ``counters``, when set, returns running totals
    (e.g. skipped updates) read when the line is written, i.e. after the step's
    optimizer update: they replace the values the trainer logged at loss time,
    which do not count that step's own update yet.
    """

    def __init__(
        self, output_dir: str | Path, counters: Callable[[], dict[str, float]] | None = None
    ) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.counters = counters

    def on_train_begin(self, args, state, control, **kwargs):
        if not args.should_save or not self.path.exists():
            return control
        keep_steps_up_to(self.path, state.global_step)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        is_eval = any(k.startswith("eval_") for k in logs or {})
        if not state.is_world_process_zero or not logs or ("reward" not in logs and not is_eval):
            return control
        row = {"step": state.global_step}
        row.update({k: v for k, v in logs.items() if isinstance(v, int | float)})
        if self.counters is not None and not is_eval:
            row.update(self.counters())
        with open_append(self.path.parent, self.path.name) as f:
            f.write(json.dumps(row) + "\n")
        return control


class FirstUpdateClipFraction(TrainerCallback):
    """Logs the clip fraction of the run's first optimizer update as
    ``bicc/first_update_clip_frac``, whichever loss computed it.

    On-policy the first update has ``pi_theta = pi_old``, so any clipping there comes
    from the ratio's definition: with BiCC's ``paper`` mode the ratio is
    ``pi(o|[q;O_opp]) / pi_old(o|q)``, not 1 (docs/bicc.md). At the end of step 1 the
    trainer's metric buffer (``metrics()``, TRL's ``_metrics["train"]``) holds that
    step's per-micro-batch clip fractions, appended by either loss route as
    ``clip_ratio/region_mean``; their mean (what the step's
    own log line shows under that name) is added under the new key, which the next log
    writes (with ``logging_steps`` > 1 too: it is not mixed with later steps). A resumed
    run (first step already past) logs nothing; a loss without clipping (ConSPO) neither.
    """

    def __init__(self, metrics: Callable[[], dict[str, list[float]]]) -> None:
        self.metrics = metrics

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step != 1:
            return control
        buffer = self.metrics()
        for key in CLIP_FRACTION_KEYS:
            values = [float(v) for v in buffer.get(key, []) if math.isfinite(float(v))]
            if values:
                buffer[FIRST_UPDATE_CLIP_KEY] = [sum(values) / len(values)]
                break
        return control


def _shown(value: object) -> str:
    """A logged number for the bar; a step whose every reward was None logs none."""
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


class RichProgress(TrainerCallback):
    """A progress bar with the step, the reward and the training accuracy (main process only)."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.progress = Progress(
                TextColumn("RL"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("reward {task.fields[reward]}  acc {task.fields[acc]}"),
                TimeRemainingColumn(),
            )
            self.progress.start()
            self.task = self.progress.add_task(
                "rl", total=state.max_steps, completed=state.global_step, reward="-", acc="-"
            )
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is not None and logs and "reward" in logs:
            self.progress.update(
                self.task,
                completed=state.global_step,
                reward=_shown(logs["reward"]),
                acc=_shown(logs.get("reward/accuracy")),
            )
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        return control


def attach_project_callbacks(trainer) -> None:
    """The project's callbacks on ``trainer`` (every RLVRTrainer attaches them itself, so
    the CLI's runs and hand-built ones log alike): the non-finite update guard
    (``trainer.update_guard``) and skip, the running counters in the logs (so in every
    report_to), the loss's token counts, ``metrics.jsonl``, the verifier counters, BiCC's
    first-update clip fraction, the learning-signal checks (``trainer.learning_signal``)
    and the diagnostics."""
    from ..rewards.logging_callback import VerifierCountersCallback
    from .disk import CheckpointSizes
    from .learning_signal import LearningSignal
    from .reward_guards import unique_names
    from .training_diagnostics import diagnostics_callback
    from .update_guards import NonFiniteUpdateGuard, SkipNonFiniteUpdates

    config = trainer.args
    # Two reward functions of one name log under two metric keys (score, score_2).
    trainer.reward_func_names = unique_names(list(trainer.reward_func_names))
    guard = NonFiniteUpdateGuard(max_snapshot_bytes=config.rollback_snapshot_max_bytes)
    guard.reduce = lambda flag: trainer.accelerator.reduce(
        flag.to(trainer.accelerator.device), reduction="sum"
    )
    trainer.update_guard = guard
    trainer.add_callback(guard)
    trainer.add_callback(SkipNonFiniteUpdates(trainer))

    def totals() -> dict[str, float]:
        return {
            "loss/skipped_updates_total": trainer.skipped_updates,
            "loss/nonfinite_total": trainer.nonfinite_losses,
            "guard/rolled_back_total": guard.rolled_back,
        }

    trainer.add_callback(RunCounters(totals, lambda: trainer._metrics["train"]))
    trainer.add_callback(LossForwardTokensLog(trainer))  # what BiCC costs, in tokens
    trainer.add_callback(VerifierCountersCallback(trainer))
    if config.bicc:  # how much the ratio mode clips on-policy (docs/bicc.md)
        trainer.add_callback(FirstUpdateClipFraction(lambda: trainer._metrics["train"]))
    trainer.add_callback(MetricsJsonl(config.output_dir))
    trainer.add_callback(CheckpointSizes())  # sizes on disk, and the options that keep less
    # Whether the run can learn, and if not why (docs/first-run.md).
    trainer.learning_signal = LearningSignal(trainer)
    trainer.add_callback(trainer.learning_signal)
    diagnostics = diagnostics_callback(trainer, config.output_dir)
    if diagnostics is not None:
        trainer.add_callback(diagnostics)
