"""Callbacks: ``metrics.jsonl``, the first update's clip fraction and the progress bar."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from transformers import TrainerCallback

from .jsonl import keep_steps_up_to

#: metrics.jsonl keys every run logs whichever loss it uses (the stages', the guards', the
#: verifier's and TRL's generation-side ones), and their meaning (also in docs/metrics.md).
METRIC_KEYS = {
    "step": "optimizer step",
    "reward": "mean total reward of the step's completions (TRL)",
    "reward/accuracy": "share of completions with reward > reward_threshold",
    "reward/unscorable": "rows every reward function left unscored (counted as reward 0)",
    "adv/collapse_rate": "share of groups whose rewards are all equal (zero advantage)",
    "adv/collapse_wrong_rate": "share of groups whose rewards are all equal and all wrong "
    "(<= reward_threshold, e.g. all 0)",
    "adv/collapse_correct_rate": "share of groups whose rewards are all equal and all "
    "correct (> reward_threshold, e.g. all 1)",
    "rcc/cov": "mean over groups of the population Cov(R, delta)",
    "rcc/delta_mean": "mean delta of all completions",
    "rcc/delta_correct": "mean delta of the correct completions",
    "rcc/delta_wrong": "mean delta of the wrong completions",
    "rcc/baseline_shift": "(RCC on) mean |b* - mean_g R| over groups",
    "bicc/context_tokens": "(BiCC on) mean tokens of BiCC context added per row",
    "bicc/conditioned_frac": "(BiCC on) share of rows given a conditioned prompt",
    "bicc/first_update_clip_frac": "(BiCC on) clip/frac (or TRL's clip_ratio/region_mean) of "
    "the run's first optimizer update, logged once (docs/bicc.md, ratio modes)",
    "reward/skipped_groups": "groups skipped for a non-finite reward (skip_group)",
    "loss/nonfinite_total": "training losses found non-finite so far",
    "loss/skipped_updates_total": "optimizer steps skipped for a non-finite loss or gradient",
    "guard/rolled_back_total": "optimizer steps rolled back for non-finite parameters",
    # The verifier's counters (math_verify rewards; cumulative since the reward was made,
    # summed over reward functions and processes; VerifierCountersCallback).
    "verifier/timeouts": "answers whose verifier worker's alarm fired (scored 0)",
    "verifier/killed": "answers whose worker missed the deadline and was killed (scored 0)",
    "verifier/crashed": "answers whose worker died while checking them (scored 0)",
    "verifier/errors": "answers on which math-verify raised (scored 0)",
    "verifier/worker_restarts": "verifier workers started to replace killed or dead ones",
    "verifier/worker_crashes": "verifier worker processes found dead",
    "verifier/server_restarts": "verifier servers found dead and started again",
    "loss": "training loss (TRL)",
    "step_time": "seconds of the optimizer step, generation included (TRL)",
}

#: The loss-side keys of a run on the project's loss (gmpo, conspo, ReCo, OC-GRPO,
#: GSPO-token, rcc_reference='sampling', bicc_mix < 1: trl_settings.project_loss_reason).
PROJECT_LOSS_METRIC_KEYS = {
    "loss/policy": "the policy term of the loss, without KL (policy recipes)",
    "clip/frac": "share of tokens (rows for gspo) where clipping zeroes the gradient",
    "clip/low_frac": "the same, ratio below 1 - clip_low with A < 0 (gmpo: its log-ratio)",
    "clip/high_frac": "the same, ratio above 1 + clip_high with A > 0 (gmpo: its log-ratio)",
    "ratio/mean": "mean importance ratio (rows for gspo; gmpo's geometric-mean weight)",
    "kl/mean": "(reference log-probs in the batch: beta > 0) mean per-token k3 KL",
    "conspo/valid_groups": "(conspo) share of groups with both positives and negatives",
    "conspo/pos_prob": "(conspo) mean InfoNCE probability of the positives",
    "conspo/score_gap": "(conspo) mean score of the positives minus the negatives",
    "aux_loss": "(a MoE model) the router load-balancing loss, as TRL logs it",
}

#: The loss-side keys of a run on TRL's own _compute_loss (grpo, dr_grpo, dapo, gspo
#: otherwise), under TRL's names; per token, per sequence for gspo (sequence-level ratio).
TRL_LOSS_METRIC_KEYS = {
    "clip_ratio/low_mean": "share of tokens (rows for gspo) with ratio < 1 - epsilon and A < 0",
    "clip_ratio/high_mean": "share of tokens (rows for gspo) with ratio > 1 + epsilon_high, A > 0",
    "clip_ratio/region_mean": "share of tokens (rows for gspo) in either clipped region",
    "clip_ratio/low_min": "lowest share of low-clipped tokens in one completion",
    "clip_ratio/high_max": "highest share of high-clipped tokens in one completion",
    "entropy": "mean per-token entropy of the policy over completion tokens",
    "kl": "(beta > 0) mean per-token KL to the reference (TRL's k3, or its bias-corrected one)",
    "policy_loss": "(entropy_coef set) the loss before the entropy bonus",
    "entropy_coef": "(entropy_coef set) the entropy bonus coefficient of the step",
    "aux_loss": "(a MoE model) the router load-balancing loss",
}


def loss_metric_keys(cfg) -> dict[str, str]:  # noqa: ANN001
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return control


#: The share clipped to zero gradient as each loss route logs it: the project's losses
#: (tokens; rows for GSPO), TRL's ``_compute_loss`` (the same definition, clip_ratio/*).
CLIP_FRACTION_KEYS = ("clip/frac", "clip_ratio/region_mean")
FIRST_UPDATE_CLIP_KEY = "bicc/first_update_clip_frac"


class FirstUpdateClipFraction(TrainerCallback):
    """Logs the clip fraction of the run's first optimizer update as
    ``bicc/first_update_clip_frac``, whichever loss computed it.

    On-policy the first update has ``pi_theta = pi_old``, so any clipping there comes
    from the ratio's definition: with BiCC's ``paper`` mode the ratio is
    ``pi(o|[q;O_opp]) / pi_old(o|q)``, not 1 (docs/bicc.md). At the end of step 1 the
    trainer's metric buffer (``metrics()``, TRL's ``_metrics["train"]``) holds that
    step's per-micro-batch clip fractions, appended by the project's loss as
    ``clip/frac`` or by TRL's as ``clip_ratio/region_mean``; their mean (what the step's
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


def attach_project_callbacks(trainer) -> None:  # noqa: ANN001
    """The project's callbacks on ``trainer`` (every RLVRTrainer attaches them itself, so
    the CLI's runs and hand-built ones log alike): the non-finite update guard
    (``trainer.update_guard``) and skip, the running counters in the logs (so in every
    report_to), ``metrics.jsonl``, the verifier counters, BiCC's first-update clip
    fraction, the learning-signal checks (``trainer.learning_signal``) and the
    diagnostics."""
    from ..rewards.logging_callback import VerifierCountersCallback
    from .diagnostics import diagnostics_callback
    from .guards import NonFiniteUpdateGuard, SkipNonFiniteUpdates, unique_names
    from .learning_signal import LearningSignal

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
    trainer.add_callback(VerifierCountersCallback(trainer))
    if config.bicc:  # how much the ratio mode clips on-policy (docs/bicc.md)
        trainer.add_callback(FirstUpdateClipFraction(lambda: trainer._metrics["train"]))
    trainer.add_callback(MetricsJsonl(config.output_dir))
    # Whether the run can learn, and if not why (docs/first-run.md).
    trainer.learning_signal = LearningSignal(trainer)
    trainer.add_callback(trainer.learning_signal)
    diagnostics = diagnostics_callback(trainer, config.output_dir)
    if diagnostics is not None:
        trainer.add_callback(diagnostics)
