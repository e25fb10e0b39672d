"""What a run says of itself: the settings line at its start, and summary.json at its end
(held-out avg@n before and after, steps, skipped and rolled-back updates, whether it
learned, and the error of a run that learned nothing)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..trainer.config import RLVRConfig
from .heldout import heldout_reward_index, heldout_score


def settings_line(config: RLVRConfig) -> str:
    """The settings a short run depends on most, in one line for the start of the run
    (the CLI prints it under ``base configuration``): learning rate and schedule with the
    warm-up in steps, BiCC's mix, RCC, and how the reward reads answers."""
    from ..rewards import AnswerReading

    schedule = str(getattr(config.lr_scheduler_type, "value", config.lr_scheduler_type))
    parts = [f"learning_rate {config.learning_rate:g}", f"lr_scheduler_type {schedule}"]
    if schedule not in ("constant", "reduce_lr_on_plateau"):
        if config.max_steps >= 1:
            warmup = config.get_warmup_steps(config.max_steps)
            parts.append(
                f"warm-up {warmup} of {config.max_steps} steps (warmup_steps "
                f"{config.warmup_steps:g})"
            )
        else:
            parts.append(f"warmup_steps {config.warmup_steps:g}")
    parts.append(f"max_steps {config.max_steps}")
    parts.append(bicc_settings(config))
    parts.append("rcc on" if config.rcc else "rcc off")
    if config.model != "embedded":
        parts.append(f"rewards {', '.join(config.rewards)}")
        if "math_verify" in config.rewards:
            reading = AnswerReading(
                answer_line=config.answer_line,
                answer_phrase=config.answer_phrase,
                last_number_fallback=config.last_number_fallback,
            )
            parts.append(f"math_verify reads {reading.formats()}")
        parts.append(f"held-out reward {config.rewards[heldout_reward_index(config)]}")
    return "; ".join(parts)


def any_step_scored(metrics_file: Path, first: int) -> bool:
    """Whether a step after ``first`` logged a numeric reward (TRL logs None for a step
    whose every reward was None, and metrics.jsonl keeps numbers only). True when there
    is no file to tell (another process writes it, or logging is off)."""
    if not metrics_file.exists():
        return True
    from ..run_files import read_jsonl

    rows = read_jsonl(metrics_file)
    rows = [r for r in rows if r.get("step", 0) > first]
    return not rows or any(isinstance(r.get("reward"), int | float) for r in rows)


def run_summary(
    config: RLVRConfig,
    trainer: Any,
    *,
    before: list[list[bool]] | None,
    after: list[list[bool]] | None,
    started: float,
    train_rows: int,
    first: int,
    eval_only: bool,
    out: Path,
) -> dict:
    """summary.json of a run whose ``trainer`` is done: the held-out correctness matrices
    ``before`` and ``after`` (problems x samples) scored, the counts, and ``error`` when the
    run learned nothing (0 steps, every update skipped, nothing scored, or no learning
    signal with ``no_learning_signal=error``). ``first``: the step the run resumed from
    (0: a fresh start); ``started``: ``time.perf_counter()`` when the inputs were loaded.
    Without held-out scoring (``heldout_size=0``: both None) the scores are None."""
    update_guard = trainer.update_guard
    before, before_counts = heldout_score(before) if before is not None else (None, None)
    after, after_counts = heldout_score(after) if after is not None else (None, None)
    summary = {
        "recipe": config.recipe,
        "bicc": config.bicc,
        "rcc": config.rcc,
        "seed": config.seed,
        "steps": trainer.state.global_step,
        "heldout_avg@n_before": before,
        "heldout_avg@n_after": after,
        "eval_n": config.eval_n,
        "heldout_before": before_counts,
        "heldout_after": after_counts,
        "nonfinite_losses": trainer.nonfinite_losses,
        "skipped_updates": trainer.skipped_updates,
        "rolled_back_updates": update_guard.rolled_back,
        "wall_seconds": time.perf_counter() - started,
        "heldout_reward": "arithmetic_reward"
        if config.model == "embedded"
        else config.rewards[heldout_reward_index(config)],
        "learning_signal": trainer.learning_signal.summary(config),
    }
    # Steps of this process's training (a resumed run counts from its checkpoint).
    steps_here = trainer.state.global_step - first
    lost = trainer.skipped_updates + update_guard.rolled_back
    if steps_here == 0 and not eval_only:
        summary["error"] = (
            f"the run trained 0 optimizer steps ({train_rows} training rows, "
            f"max_steps={config.max_steps}, num_train_epochs={config.num_train_epochs}): "
            "give more training rows than one step's prompts, or more steps"
        )
    elif steps_here > 0 and lost >= steps_here:
        summary["error"] = (
            f"every one of the {steps_here} optimizer steps was skipped (non-finite loss or "
            f"gradient: {trainer.skipped_updates}) or rolled back (non-finite parameters: "
            f"{update_guard.rolled_back}): the run learned nothing"
        )
    elif steps_here > 0 and not any_step_scored(out / "metrics.jsonl", first):
        summary["error"] = (
            f"no completion of the {steps_here} steps was scored: every reward function "
            "returned None for every row, so every advantage was 0 and the run learned "
            "nothing; fix the reward functions"
        )
    nothing = summary["learning_signal"]["learned_nothing"]
    if nothing and "error" not in summary and config.no_learning_signal == "error":
        summary["error"] = f"{nothing} (no_learning_signal=error); the causes found: " + (
            "; ".join(summary["learning_signal"]["causes"].values()) or "none named"
        )
    return summary


def bicc_settings(config: Any) -> str:
    """How BiCC runs, in the start line's words: its form and that form's weight."""
    return f"bicc on ({bicc_form_words(config)})" if config.bicc else "bicc off"


def bicc_form_words(config: Any) -> str:
    """BiCC's form and that form's settings, e.g. ``bicc_form conditioned: bicc_mix 1, ratio
    paper`` (the start line's words; compare's table names each BiCC arm's form so)."""
    if config.bicc_form == "distill":
        return (
            f"bicc_form distill: weight {config.bicc_distill_weight:g}, rows "
            f"{config.bicc_distill_rows}, teacher {config.bicc_teacher}"
        )
    return f"bicc_form conditioned: bicc_mix {config.bicc_mix:g}, ratio {config.bicc_ratio_mode}"
