"""Running ``compare``'s matrix: one compare per OUT (its lock), the config copied once,
each run executed (skipped when finished, resumed from its newest complete checkpoint,
left alone when a live process holds its folder), Ctrl-C and SIGTERM stopping the
running runs, and ``results.json``/``results.md`` rewritten as runs finish."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..run_files import adopt, read_text, write_file
from .launch import _CHILDREN, _launch, _record_failure, _write_note
from .spec import (
    BUSY_NOTE,
    BUSY_PREFIX,
    CompareSpec,
    RunResult,
    RunSpec,
    _config_args,
    finished_summary,
    plan_runs,
)
from .tables import build_results, results_markdown
from .warm_start import _sft_caches, sft_cache_dir

BASE_CONFIG = "base-config.yaml"


def _resume_args(run: RunSpec) -> list[str]:
    """How an unfinished run continues: from its newest complete checkpoint, else anew in
    its folder (replacing what the stopped attempt left)."""
    from ..checkpoints import newest_complete_checkpoint
    from ..run.folder import SUMMARY_FILE, holds_run

    resumable = newest_complete_checkpoint(run.output_dir)[0] is not None
    if resumable and not (run.output_dir / SUMMARY_FILE).exists():
        return ["--resume", "true"]
    return ["--overwrite_output_dir", "true"] if holds_run(run.output_dir) else []


def execute_run(spec: CompareSpec, run: RunSpec) -> RunResult:
    """Run one cell unless its summary exists; a failure is recorded, not raised
    (Ctrl-C is: the caller marks the run interrupted)."""
    from ..run.folder import SFT_DIR
    from ..run.folder_lock import held_by_a_live_process

    what = f"run {run.recipe}/{run.arm}/seed{run.seed}"
    try:
        finished = finished_summary(run.output_dir)
        if finished is not None:
            return RunResult(run, "skipped", summary=finished)
        # Its log and notes are opened for writing below: never those of a live run (this
        # compare holds OUT's lock, so a live run here is none of its own).
        if held_by_a_live_process(run.output_dir):
            return RunResult(run, "busy", error=BUSY_NOTE)
        run.output_dir.mkdir(parents=True, exist_ok=True)
        for note in ("error.txt", "interrupted.txt"):
            (run.output_dir / note).unlink(missing_ok=True)
        cached = sft_cache_dir(spec, run.seed) / SFT_DIR
        if cached.exists() and not (run.output_dir / SFT_DIR).exists():
            shutil.copytree(cached, run.output_dir / SFT_DIR)
        argv = ["train", *_config_args(spec), *run.overrides(spec), *_resume_args(run)]
    except (OSError, ValueError) as err:
        # Before the run started: its folder, warm start or summary could not be handled.
        message = f"{what} could not start: {type(err).__name__}: {err}"
        _write_note(run.output_dir / "error.txt", message)
        return RunResult(run, "failed", error=message)
    log = run.output_dir / "train.log"
    code = _launch(argv, log, spec.jobs == 1)
    summary = finished_summary(run.output_dir)
    if code != 0 or summary is None:
        # A summary that records an error (every update skipped) is a failure too.
        code = code or 1
        return RunResult(run, "failed", error=_record_failure(run.output_dir, what, code, log))
    return RunResult(run, "done", summary=summary)


def _interrupted(run: RunSpec) -> RunResult:
    message = "interrupted (Ctrl-C); run compare again to resume it"
    _write_note(run.output_dir / "interrupted.txt", message + "\n")
    return RunResult(run, "interrupted", error=message)


def _raise_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _sigterm_as_ctrl_c():
    """SIGTERM (``kill``, a job scheduler) stops the matrix as Ctrl-C does, so that the
    children are stopped with it instead of left running; returns the previous handler
    (None off the main thread, where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_ctrl_c)


def run_compare(spec: CompareSpec, *, echo=print) -> dict:
    """Run the matrix (finished runs skipped), then write results.md and results.json.

    The config YAML is copied to ``OUT/base-config.yaml`` first and every run reads
    that copy, so that an edit of the original while the matrix runs changes no run.
    Ctrl-C returns at once with the running run(s) in ``report["interrupted"]``.

    One compare per OUT: a second one while this one lives is refused (``UserError``)
    before it writes anything; the lock goes with this process however it ends.
    """
    from ..configs import base_config_for, model_in_args
    from ..run.folder_lock import OutputDirLock
    from ..trainer.parse import read_config_text

    # No --config: the base ``train`` would take for this --model (embedded.yaml for the
    # embedded model, paper.yaml for any other), so that a matrix runs what train runs.
    source = Path(spec.config) if spec.config else base_config_for(model_in_args(spec.overrides))
    # Read once, before OUT is made or locked: every run is planned from this text and
    # reads its copy (a pipe, such as --config <(...), gives its text to the first read
    # only; one with no writer fails here, leaving nothing behind).
    text = read_config_text(source)
    runs = plan_runs(spec, text if spec.config else None)
    in_use = (
        "compare --out {path}: another compare is running in this folder (a live process "
        "holds its lock); wait for it to end, stop it, or choose another --out"
    )
    with OutputDirLock(spec.output_dir, in_use=in_use):
        return _run_matrix(spec, echo, source, text, runs)


def _run_matrix(spec: CompareSpec, echo, source: Path, text: str, runs: list) -> dict:
    """:func:`run_compare` once OUT is locked, with the config's ``source`` and ``text``
    read and the ``runs`` planned."""
    out = Path(spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / BASE_CONFIG
    # a compare folder of an earlier version (no record of the files it wrote): its own
    if base.is_file() and read_text(base).startswith("# copied from "):
        adopt(out, [BASE_CONFIG, "results.json", "results.md"])
    write_file(out, BASE_CONFIG, f"# copied from {source}\n" + text)
    spec = dataclasses.replace(spec, config=str(base))
    started = time.perf_counter()
    pending = [r for r in runs if finished_summary(r.output_dir) is None]
    finished: list[RunResult] = []
    lock = threading.Lock()
    _CHILDREN.stopping.clear()

    def record(result: RunResult) -> RunResult:
        _echo_result(echo, result)
        with lock:  # the table so far, so that a long matrix can be read while it runs
            finished.append(result)
            _write_results(build_results(finished, spec, pending=len(runs) - len(finished)), out)
        return result

    def one(run: RunSpec) -> RunResult:
        if _CHILDREN.stopping.is_set():
            return RunResult(run, "pending")
        if run.seed in sft_errors and run in pending:
            if sft_errors[run.seed].startswith(BUSY_PREFIX):
                return record(RunResult(run, "busy", error=sft_errors[run.seed]))
            return record(RunResult(run, "failed", error=sft_errors[run.seed]))
        try:
            result = execute_run(spec, run)
        except KeyboardInterrupt:
            return record(_interrupted(run))
        return record(result)

    results: list[RunResult] = []
    interrupted = False
    previous = _sigterm_as_ctrl_c()
    try:
        sft_errors = _sft_caches(spec, sorted({r.seed for r in pending}), echo)
        if spec.jobs == 1:
            for run in runs:  # the main thread: Ctrl-C lands in the running run at once
                results.append(one(run))
                if results[-1].status == "interrupted":
                    interrupted = True
                    break
        else:
            with ThreadPoolExecutor(max_workers=spec.jobs) as pool:
                futures = [pool.submit(one, run) for run in runs]
                try:
                    results = [f.result() for f in futures]
                except KeyboardInterrupt:
                    interrupted = True
                    _CHILDREN.stop()
                    results = [f.result() for f in futures]
    except KeyboardInterrupt:
        interrupted = True  # during a warm start, before any run
        _CHILDREN.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    interrupted = interrupted or any(r.status == "interrupted" for r in results)
    done = [r for r in results if r.status != "pending"]
    report = build_results(done, spec, pending=len(runs) - len(done))
    report["wall_seconds"] = time.perf_counter() - started
    report["interrupted"] = [
        {"recipe": r.run.recipe, "arm": r.run.arm, "seed": r.run.seed}
        for r in results
        if r.status == "interrupted"
    ]
    if interrupted and not report["interrupted"]:
        report["interrupted"] = [{"stage": "before any run finished"}]
    _write_results(report, out)
    return report


def _echo_result(echo, result: RunResult) -> None:
    """The line a finished run prints (none for a run still pending)."""
    label = f"{result.run.recipe}/{result.run.arm}/seed{result.run.seed}"
    if result.status == "failed":
        echo(f"FAILED {label}: see {result.run.output_dir}/error.txt")
    elif result.status == "interrupted":
        echo(f"INTERRUPTED {label}")
    elif result.status == "busy":
        echo(f"BUSY   {label}: {BUSY_NOTE}")
    elif result.status == "done":
        before, after = (result.summary[f"heldout_avg@n_{w}"] for w in ("before", "after"))
        echo(f"done   {label}: held-out {before:.3f} -> {after:.3f}")


def _write_results(report: dict, out: Path) -> None:
    # Written whole or not at all: a second Ctrl-C or a kill leaves the previous table.
    for name, text in (
        ("results.json", json.dumps(report, indent=2) + "\n"),
        ("results.md", results_markdown(report)),
    ):
        write_file(out, name, text)
