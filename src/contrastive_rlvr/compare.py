"""``contrastive-rlvr compare``: recipes x {plain, BiCC, RCC, BiCC+RCC} x seeds, and the table.

Every run is what ``contrastive-rlvr train`` runs, its output in
``OUT/<recipe>/<arm>/seed<k>``:

- every run reads ``OUT/base-config.yaml``, a copy of the config YAML made when
  ``compare`` starts (edits of the original during a matrix change no run);
- a run whose ``summary.json`` exists (and records no ``error``) is not run again; one
  whose summary records an error is a failed run;
- each run is keyed on its resolved config less where it writes and how it logs,
  saves and resumes (:func:`run_settings`): a folder whose ``config.yaml`` was made
  with other settings is refused before any run starts when it holds a result or a
  checkpoint (use another OUT or remove it), and replaced when it holds only a failed
  or unstarted attempt; a field the folder's config predates counts as its default
  (an older version's runs are reused while the new option stays at its default);
  ``results.json`` records each run's key (``config_sha256``) and config file;
- one compare per OUT: a second one is refused before it writes anything (a lock on
  the folder, gone with its holder however it ends); a run or warm-start folder that a
  live process holds (a run this compare did not start) is left alone, its files never
  opened, and reported as ``busy``;
- a failed run leaves ``error.txt`` (exit code and the end of its log) and the
  others go on; ``train.log`` holds each run's output;
- with the embedded default, the SFT warm start of each seed is built once in
  ``OUT/sft-cache/seed<k>/sft-model`` and copied into every run of that seed
  (``train`` reuses ``output_dir/sft-model`` when present);
- ``jobs=1`` (the default) runs everything in this process and its main thread,
  one run after another (imports paid once); ``jobs > 1`` runs that many child
  processes (``python -m contrastive_rlvr.compare train ...``) at once, one torch
  thread each, each the leader of its own process group and ending with this
  process however it ends (Linux: the parent-death signal, :mod:`.child_processes`),
  so that a compare killed with SIGKILL leaves no run going on;
- Ctrl-C stops the matrix at once: the running run(s) stop (child processes get
  SIGINT, then SIGKILL after ``STOP_GRACE_S``), are marked ``interrupted`` in
  ``results.json`` (and ``interrupted.txt`` in their folder), and no other run
  starts. Running ``compare`` again resumes: a run with a complete checkpoint
  continues from it, one without starts again in its folder;
- a failure before a run starts (its folder cannot be made, the warm start cannot
  be copied) is recorded as that run's failure, like a failure during it.

Then ``OUT/results.md`` (the BiCC paper's Table 2 layout: one row per arm,
held-out avg@n after RL with its 95% Student t interval over seeds, the
paired difference to the plain arm of the same recipe, the SFT start) and
``OUT/results.json`` (the same numbers and the per-seed values).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .child_processes import child_env, die_with_parent
from .stats import (
    DIFFERENCE_RANGE,
    UNIT_RANGE,
    Bounds,
    mean_ci,
    mean_text,
    paired_difference_ci,
)

#: arm name -> (bicc, rcc)
ARMS: dict[str, tuple[bool, bool]] = {
    "plain": (False, False),
    "bicc": (True, False),
    "rcc": (False, True),
    "bicc+rcc": (True, True),
}


def recipe_label(name: str) -> str:
    """The label tables and figures print for recipe ``name`` (the recipe table's)."""
    from .algorithms.registry import RECIPES  # torch: imported when a table is made

    return RECIPES[name].display_label if name in RECIPES else name


def registered_recipes() -> list[str]:
    from .algorithms.registry import RECIPES

    return list(RECIPES)

ARM_SUFFIX = {"plain": "", "bicc": " + BiCC", "rcc": " + RCC", "bicc+rcc": " + BiCC + RCC"}
#: Set per run by the matrix; an override of these in ``overrides`` is refused.
MATRIX_FIELDS = ("recipe", "bicc", "rcc", "seed", "output_dir")
SFT_CACHE = "sft-cache"
BASE_CONFIG = "base-config.yaml"
SFT_KEY_FILE = "key.json"
LOG_TAIL_CHARS = 4000
#: Seconds a child process has to stop after SIGINT before it is killed.
STOP_GRACE_S = 30
CI_LEVEL = 0.95
METRICS_FILE = "metrics.jsonl"


@dataclass
class CompareSpec:
    """What ``compare`` runs (every field settable from a YAML file and from flags).

    Attributes:
        recipes: recipe names (rows are grouped by recipe).
        arms: any of ``plain``, ``bicc``, ``rcc``, ``bicc+rcc``.
        seeds: run seeds (also the seed of the SFT warm start and of the evaluation).
        config: RLVRConfig YAML applied to every run (None: the shipped base ``train``
            takes for the ``--model`` of ``overrides``: embedded.yaml for the embedded
            model or none named, paper.yaml for any other).
        overrides: ``--field value`` RLVRConfig overrides applied to every run.
        output_dir: OUT.
        jobs: runs at once.
    """

    recipes: list[str] = field(default_factory=registered_recipes)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    output_dir: str = "runs/compare"
    jobs: int = 1

    def __post_init__(self) -> None:
        from .algorithms import RECIPES

        for name in self.recipes:
            if name not in RECIPES:
                raise ValueError(f"recipes: unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
        for arm in self.arms:
            if arm not in ARMS:
                raise ValueError(f"arms: unknown arm {arm!r}; valid: {', '.join(ARMS)}")
        for name, values in (("recipes", self.recipes), ("arms", self.arms), ("seeds", self.seeds)):
            if not values:
                raise ValueError(f"{name}: give at least one")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: duplicates in {values}")
        if self.jobs < 1:
            raise ValueError(f"jobs={self.jobs} is invalid: must be >= 1")
        for item in self.overrides:
            if item.startswith("--") and item[2:].split("=")[0].replace("-", "_") in MATRIX_FIELDS:
                raise ValueError(
                    f"overrides: {item} is set by the matrix for each run; use the recipes, "
                    "arms, seeds and output_dir options instead"
                )


def load_compare_yaml(path: str | Path) -> dict:
    """The CompareSpec fields in a YAML file. ``overrides`` may be a mapping
    ``field: value`` or a list of ``--field value`` strings."""
    from .trainer.parse import load_yaml

    # overrides may be a mapping (converted below), which the list[str] field type would refuse
    data = load_yaml(
        path, CompareSpec, what="compare file", checked_by_caller=frozenset({"overrides"})
    )
    overrides = data.get("overrides")
    if isinstance(overrides, dict):
        data["overrides"] = [s for k, v in overrides.items() for s in (f"--{k}", _flag(v))]
    elif overrides is not None and not isinstance(overrides, list):
        raise ValueError(f"compare file {path}: overrides must be a mapping or a list")
    return data


def make_spec(spec_file: str | Path | None = None, **flags: object) -> CompareSpec:
    """CompareSpec from the defaults, then the YAML file, then the flags that are not None.

    ``recipes``, ``arms`` and ``seeds`` flags may be comma-separated strings;
    ``overrides`` from the flags are appended to those of the file.
    """
    values = load_compare_yaml(spec_file) if spec_file else {}
    for name in ("recipes", "arms", "seeds"):
        flag = flags.pop(name, None)
        if flag is not None:
            values[name] = [x.strip() for x in str(flag).split(",") if x.strip()]
    try:
        values["seeds"] = [int(k) for k in values.get("seeds", [0, 1, 2])]
    except ValueError as err:
        raise ValueError(f"seeds: integers expected, got {values.get('seeds')}") from err
    extra = flags.pop("overrides", None) or []
    values["overrides"] = [str(x) for x in values.get("overrides", [])] + list(extra)
    values.update(
        {k: (str(v) if isinstance(v, Path) else v) for k, v in flags.items() if v is not None}
    )
    return CompareSpec(**values)


def _flag(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix; ``config_sha256`` is the key of its resolved settings
    (:func:`run_settings`, seed left out so that the seeds of one row share it)."""

    recipe: str
    arm: str
    seed: int
    output_dir: Path
    config_sha256: str = field(default="", compare=False)

    def overrides(self, spec: CompareSpec) -> list[str]:
        """RLVRConfig overrides of this run: the shared ones, then this cell's."""
        bicc, rcc = ARMS[self.arm]
        return [
            *spec.overrides,
            *("--recipe", self.recipe, "--bicc", _flag(bicc), "--rcc", _flag(rcc)),
            *("--seed", str(self.seed), "--output_dir", str(self.output_dir)),
        ]


#: Resolved fields that do not change a run's result: where it writes, how it resumes,
#: how it shows progress, how often it logs and saves (and, from :func:`unkeyed_fields`,
#: every other field a resume may change, the held-out evaluation's excepted). Every
#: other field is part of a run's key.
UNKEYED_FIELDS = frozenset(
    {
        "output_dir", "logging_dir", "run_name", "base_config", "resume",
        "resume_from_checkpoint", "overwrite_output_dir", "resume_allow_config_change",
        "disable_tqdm", "torch_threads", "report_to", "log_level", "log_level_replica",
    }
)  # fmt: skip
#: Fields a resume may change that still change compare's table: the held-out evaluation.
TABLE_FIELDS = frozenset({"eval_n", "eval_limit"})


def unkeyed_fields() -> frozenset[str]:
    """:data:`UNKEYED_FIELDS` and the fields that do not change what is trained
    (``checkpoints.NON_TRAINING_FIELDS``: logging and saving intervals, Hub
    uploads, data-loader workers), less :data:`TABLE_FIELDS`."""
    from .checkpoints import NON_TRAINING_FIELDS

    return UNKEYED_FIELDS | (NON_TRAINING_FIELDS - TABLE_FIELDS)


def run_settings(config_fields: dict) -> dict:
    """The settings a run's result depends on: its resolved config less
    :func:`unkeyed_fields`, normalised through YAML as ``config.yaml`` is written."""
    import yaml

    unkeyed = unkeyed_fields()
    kept = {k: v for k, v in config_fields.items() if k not in unkeyed}
    return yaml.safe_load(yaml.safe_dump(kept, sort_keys=True)) or {}


def _settings_sha(settings: dict) -> str:
    import hashlib

    without_seed = {k: v for k, v in settings.items() if k != "seed"}
    text = json.dumps(without_seed, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_runs(spec: CompareSpec, config_text: str | None = None) -> list[RunSpec]:
    """The runs in order (recipe, arm, seed); every config is built (so validated, ranges
    included) before any runs, and checked against what its folder already holds: its
    settings and the content of its dataset file. ``config_text``: the text of
    ``spec.config`` read once by the caller (a pipe cannot be read twice)."""
    from .trainer.parse import parse_config

    out = Path(spec.output_dir)
    runs, clashes = [], []
    data_identity: dict[str, dict | None] = {}  # dataset -> its fingerprint, hashed once
    for recipe in spec.recipes:
        for arm in spec.arms:
            for seed in spec.seeds:
                run = RunSpec(recipe, arm, seed, out / recipe / arm / f"seed{seed}")
                try:
                    cfg = parse_config(spec.config, run.overrides(spec), text=config_text)
                except (ValueError, SystemExit) as err:
                    raise ValueError(f"run {recipe}/{arm}/seed{seed}: {err}") from err
                settings = run_settings(cfg.to_dict())
                if cfg.dataset not in data_identity:
                    data_identity[cfg.dataset] = _data_fingerprint(cfg.dataset)
                data = data_identity[cfg.dataset]
                clash = _folder_clash(run.output_dir, settings, data)
                if clash:
                    clashes.append(f"{recipe}/{arm}/seed{seed} ({clash})")
                # The data's content is part of the key: results.json tells its versions apart.
                keyed = {**settings, "data_sha256": data and data.get("sha256")}
                runs.append(dataclasses.replace(run, config_sha256=_settings_sha(keyed)))
    if clashes:
        raise ValueError(
            f"{len(clashes)} run folder(s) of {out} hold a run made on other data or other "
            f"settings: {'; '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''}; old and new "
            "runs are never mixed in one table: choose another --out, or remove those folders"
        )
    return runs


def _data_fingerprint(dataset: str | None) -> dict | None:
    """The content fingerprint of a local dataset file (None: the embedded task, or a
    Hub name, whose content a run records from the loaded table)."""
    from .data import file_fingerprint

    if not dataset or not Path(dataset).is_file():
        return None
    return file_fingerprint(dataset)


def _data_clash(run_dir: Path, data: dict | None) -> str | None:
    """How the dataset file differs from the one the run in ``run_dir`` recorded."""
    from .data import fingerprint_differences
    from .trainer.run import DATA_FILE

    record = run_dir / DATA_FILE
    if data is None or not record.is_file():
        return None  # nothing to compare: no file now, or a run made before data.json
    try:
        saved = json.loads(record.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{record} does not parse"
    change = fingerprint_differences(saved if isinstance(saved, dict) else {}, data)
    return None if change is None else f"dataset {saved.get('path')} changed: {change}"


def _folder_clash(run_dir: Path, settings: dict, data: dict | None = None) -> str | None:
    """The differing fields when ``run_dir`` holds a result or a checkpoint made with
    other settings than ``settings`` or on other data than ``data`` (the dataset file's
    fingerprint now); None: it holds none, or one made with these."""
    import yaml

    from .checkpoints import newest_complete_checkpoint, predates
    from .trainer.parse import YAMLTooLarge, safe_yaml
    from .trainer.run import CONFIG_FILE

    saved_file = run_dir / CONFIG_FILE
    if not saved_file.is_file():
        return None
    if finished_summary(run_dir) is None and newest_complete_checkpoint(run_dir)[0] is None:
        return None  # a failed or unstarted attempt: rerun in its place
    data_change = _data_clash(run_dir, data)
    if data_change:
        return data_change
    try:
        saved = run_settings(safe_yaml(saved_file.read_text()) or {})
    except (yaml.YAMLError, YAMLTooLarge) as err:
        return f"{saved_file} does not parse ({' '.join(str(err).split())[:100]})"
    missing = object()
    # A field the folder's run predates is no difference while it is at its default.
    diffs = [
        f"{k}: {saved.get(k, '(unset)')!r} there, {settings.get(k, '(unset)')!r} now"
        for k in sorted(set(saved) | set(settings))
        if saved.get(k, missing) != settings.get(k, missing)
        and not predates(saved, k, settings.get(k, missing))
    ]
    return ", ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else "") if diffs else None


def finished_summary(run_dir: Path) -> dict | None:
    """The summary of a run that finished without error (None: unfinished, unreadable, or
    a summary that records an ``error``: a failed run)."""
    from .trainer.run import SUMMARY_FILE

    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(summary, dict) or "error" in summary:
        return None
    return summary


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    # One thread per run: the runs share the machine's cores.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


class _Children:
    """The running child processes, so that Ctrl-C can stop them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = threading.Event()

    def stop(self) -> None:
        """SIGINT to every child's process group (as a terminal's Ctrl-C would reach a
        foreground job: the child and whatever it started), SIGKILL after the grace."""
        self.stopping.set()
        with self.lock:
            procs = list(self.procs)
        for proc in procs:
            _signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group ``proc`` leads (each child is started as the leader
    of its own group), or to ``proc`` alone once it has ended."""
    if proc.poll() is not None:
        return  # reaped: its group id may belong to someone else by now
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _child_command(argv: list[str]) -> list[str]:
    """The command line of a child process running the worker command ``argv``."""
    return [sys.executable, "-m", "contrastive_rlvr.compare", *argv]


_CHILDREN = _Children()


def _launch(argv: list[str], log: Path, in_process: bool) -> int:
    """Run the worker command ``argv`` (see :func:`_worker`) with its output in ``log``:
    in this process (exceptions caught, Ctrl-C passed on) or in a child process.
    Returns the exit code (a child stopped by Ctrl-C: negative)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        if not in_process:
            cmd = _child_command(argv)
            with _CHILDREN.lock:
                if _CHILDREN.stopping.is_set():
                    raise KeyboardInterrupt
                # Its own process group (stopped as a whole, never by a terminal's signal
                # to this one's group), and told this pid, so that it ends when this process
                # does, however this process ends (child_main: the parent-death signal).
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=child_env(_subprocess_env()),
                    process_group=0,
                )
                _CHILDREN.procs.add(proc)
            try:
                code = proc.wait()
            finally:
                with _CHILDREN.lock:
                    _CHILDREN.procs.discard(proc)
            if _CHILDREN.stopping.is_set() and code != 0:
                raise KeyboardInterrupt
            return code
        with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            try:
                _worker(argv)
            except KeyboardInterrupt:
                raise
            except BaseException:
                traceback.print_exc(file=f)
                return 1
    return 0


def _record_failure(directory: Path, what: str, code: int, log: Path) -> str:
    tail = log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log.exists() else ""
    message = f"{what} failed with exit code {code}; end of {log}:\n{tail}"
    _write_note(directory / "error.txt", message)
    return message


def _write_note(path: Path, text: str) -> None:
    """Best effort: the folder may be what could not be made."""
    with contextlib.suppress(OSError):
        path.write_text(text)


# ---------------------------------------------------------------------- SFT warm-start cache


def _sft_key(spec: CompareSpec, seed: int) -> dict:
    """What the embedded warm start depends on: the seed, the task length, the SFT steps and
    the share of reading demonstrations (and, when that share is > 0, the reading
    demonstrations' settings)."""
    from .trainer.parse import parse_config

    cfg = parse_config(spec.config, [*spec.overrides, "--seed", str(seed)])
    return {
        "model": cfg.model,
        "seed": seed,
        "embedded_terms": cfg.embedded_terms,
        "embedded_sft_steps": cfg.embedded_sft_steps,
        "embedded_sft_context_frac": cfg.embedded_sft_context_frac,
        **({"embedded_bicc_phrases": True} if cfg.embedded_bicc_phrases else {}),
        **(_reading_key(cfg) if cfg.embedded_sft_context_frac > 0 else {}),
    }


def _reading_key(cfg) -> dict:
    """What a reading warm start also depends on: its target rule and the BiCC context
    its demonstrations are cut to."""
    from .trainer.run import embedded_sft_context_budget

    return {
        "embedded_sft_context_target": cfg.embedded_sft_context_target,
        "embedded_sft_context_attempts": cfg.embedded_sft_context_attempts,
        "max_completion_length": cfg.max_completion_length,
        "temperature": cfg.temperature,
        "context_budget": embedded_sft_context_budget(cfg) if cfg.model == "embedded" else None,
        "bicc_truncation": cfg.bicc_truncation,
        "bicc_placement": cfg.bicc_placement,
        "context_max_attempts": max(cfg.num_generations - 1, 1),
    }


def sft_cache_dir(spec: CompareSpec, seed: int) -> Path:
    return Path(spec.output_dir) / SFT_CACHE / f"seed{seed}"


def build_sft_cache(spec: CompareSpec, seed: int) -> str | None:
    """Build ``OUT/sft-cache/seed<k>/sft-model`` (rebuilt when its key changed);
    returns an error message or None."""
    from .trainer.folder_lock import held_by_a_live_process
    from .trainer.run import SFT_DIR

    key = _sft_key(spec, seed)
    if key["model"] != "embedded":
        return None
    cache = sft_cache_dir(spec, seed)
    if held_by_a_live_process(cache):
        raise FolderBusy(cache)
    key_file = cache / SFT_KEY_FILE
    if (cache / SFT_DIR / "config.json").exists() and key_file.exists():
        if json.loads(key_file.read_text()) == key:
            return None
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    argv = ["warm-start", str(cache), *_config_args(spec), *spec.overrides, "--seed", str(seed)]
    code = _launch(argv, cache / "warm-start.log", in_process=spec.jobs == 1)
    if code != 0 or not (cache / SFT_DIR / "config.json").exists():
        return _record_failure(
            cache, f"SFT warm start of seed {seed}", code, cache / "warm-start.log"
        )
    key_file.write_text(json.dumps(key) + "\n")
    return None


def _config_args(spec: CompareSpec) -> list[str]:
    return ["--config", spec.config] if spec.config else []


def _worker(argv: list[str]) -> None:
    """The two worker commands, run in this process or as
    ``python -m contrastive_rlvr.compare COMMAND ...``:

    - ``warm-start DIR [--config F] [--field value ...]``: builds DIR/sft-model exactly
      as ``train`` would in an output folder DIR;
    - ``train [--config F] [--field value ...]``: one training run, no progress bar.
    """
    from .trainer.parse import parse_config
    from .trainer.run import load_run_inputs, train

    command, rest = argv[0], argv[1:]
    directory = None
    if command == "warm-start":
        directory, rest = Path(rest[0]), rest[1:]
    elif command != "train":
        raise ValueError(f"unknown worker command {command!r}: use warm-start or train")
    config_file = None
    if rest[:1] == ["--config"]:
        config_file, rest = rest[1], rest[2:]
    if directory is not None:
        rest = [*rest, "--output_dir", str(directory)]
    cfg = parse_config(config_file, rest)
    if directory is None:
        train(cfg, progress=False)
        return
    import torch

    from .trainer.folder_lock import OutputDirLock

    torch.set_num_threads(cfg.torch_threads)
    with OutputDirLock(directory):  # a later compare sees a live build and leaves it alone
        load_run_inputs(cfg, directory)


# ---------------------------------------------------------------------- running


@dataclass
class RunResult:
    run: RunSpec
    # "done", "skipped" (summary existed), "failed", "interrupted", "pending", "busy" (a
    # live process holds its folder: left alone)
    status: str
    error: str | None = None
    summary: dict | None = None


class FolderBusy(Exception):
    """A live process holds the lock of a folder this compare would write (a run or a warm
    start that this compare did not start): its files are left alone."""

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder


BUSY_NOTE = (
    "a live process holds its folder (a run this compare did not start: a train command, "
    "or a child of a compare that was killed); its files were left alone: run compare "
    "again once it has ended"
)


def _resume_args(run: RunSpec) -> list[str]:
    """How an unfinished run continues: from its newest complete checkpoint, else anew in
    its folder (replacing what the stopped attempt left)."""
    from .checkpoints import newest_complete_checkpoint
    from .trainer.run import SUMMARY_FILE, holds_run

    resumable = newest_complete_checkpoint(run.output_dir)[0] is not None
    if resumable and not (run.output_dir / SUMMARY_FILE).exists():
        return ["--resume", "true"]
    return ["--overwrite_output_dir", "true"] if holds_run(run.output_dir) else []


def execute_run(spec: CompareSpec, run: RunSpec) -> RunResult:
    """Run one cell unless its summary exists; a failure is recorded, not raised
    (Ctrl-C is: the caller marks the run interrupted)."""
    from .trainer.folder_lock import held_by_a_live_process
    from .trainer.run import SFT_DIR

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


def _sft_caches(spec: CompareSpec, seeds: list[int], echo) -> dict[int, str]:
    """Build the warm starts (in this thread for jobs=1); seed -> error message."""

    def build(seed: int) -> str | None:
        try:
            return build_sft_cache(spec, seed)
        except FolderBusy as busy:
            return f"{BUSY_PREFIX}the SFT warm start {busy.folder}: {BUSY_NOTE}"
        except OSError as err:
            return f"SFT warm start of seed {seed} could not start: {err}"

    if spec.jobs == 1:
        results = [build(k) for k in seeds]
    else:
        with ThreadPoolExecutor(max_workers=spec.jobs) as pool:
            results = list(pool.map(build, seeds))
    errors = {}
    for seed, err in zip(seeds, results, strict=True):
        if err is not None:
            errors[seed] = err
            if err.startswith(BUSY_PREFIX):
                echo(f"BUSY warm start of seed {seed}: {err[len(BUSY_PREFIX) :]}")
            else:
                echo(f"FAILED warm start of seed {seed}: see {sft_cache_dir(spec, seed)}/error.txt")
    return errors


#: Starts the message of a warm start that a live process holds (its runs are busy).
BUSY_PREFIX = "busy: "


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
    from .trainer.folder_lock import OutputDirLock

    in_use = (
        "compare --out {path}: another compare is running in this folder (a live process "
        "holds its lock); wait for it to end, stop it, or choose another --out"
    )
    with OutputDirLock(spec.output_dir, in_use=in_use):
        return _run_matrix(spec, echo)


def _run_matrix(spec: CompareSpec, echo) -> dict:
    """:func:`run_compare` once OUT is locked."""
    from .configs import base_config_for, model_in_args
    from .trainer.parse import read_config_text

    # No --config: the base ``train`` would take for this --model (embedded.yaml for the
    # embedded model, paper.yaml for any other), so that a matrix runs what train runs.
    source = Path(spec.config) if spec.config else base_config_for(model_in_args(spec.overrides))
    # Read once: every run is planned from this text and reads its copy (a pipe, such as
    # --config <(...), gives its text to the first read only).
    text = read_config_text(source)
    runs = plan_runs(spec, text if spec.config else None)
    out = Path(spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / BASE_CONFIG
    base.write_text(f"# copied from {source}\n" + text)
    spec = dataclasses.replace(spec, config=str(base))
    started = time.perf_counter()
    pending = [r for r in runs if finished_summary(r.output_dir) is None]
    finished: list[RunResult] = []
    lock = threading.Lock()
    _CHILDREN.stopping.clear()

    def record(result: RunResult) -> RunResult:
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


def _write_results(report: dict, out: Path) -> None:
    # Written whole or not at all: a second Ctrl-C or a kill leaves the previous table.
    for name, text in (
        ("results.json", json.dumps(report, indent=2) + "\n"),
        ("results.md", results_markdown(report)),
    ):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)


# ---------------------------------------------------------------------- the table


def build_results(results: list[RunResult], spec: CompareSpec, *, pending: int = 0) -> dict:
    """Per-seed values and, per recipe and arm, mean and t interval of the held-out
    avg@n after RL, of the SFT start, and of the paired difference to the plain arm."""
    per_cell: dict[tuple[str, str], dict[int, dict]] = {}
    run_dirs: dict[tuple[str, str], dict[int, Path]] = {}
    run_keys: dict[tuple[str, str], dict[int, str]] = {}
    failed, busy = [], []
    eval_n = None
    for res in results:
        if res.status in ("interrupted", "pending"):
            continue
        if res.status == "busy":
            busy.append(
                {"recipe": res.run.recipe, "arm": res.run.arm, "seed": res.run.seed,
                 "folder": str(res.run.output_dir)}
            )  # fmt: skip
            continue
        if res.summary is None:
            failed.append(
                {
                    "recipe": res.run.recipe,
                    "arm": res.run.arm,
                    "seed": res.run.seed,
                    "error_file": str(res.run.output_dir / "error.txt"),
                }
            )
            continue
        per_cell.setdefault((res.run.recipe, res.run.arm), {})[res.run.seed] = res.summary
        run_dirs.setdefault((res.run.recipe, res.run.arm), {})[res.run.seed] = res.run.output_dir
        key = (res.run.recipe, res.run.arm)
        run_keys.setdefault(key, {})[res.run.seed] = res.run.config_sha256
        eval_n = res.summary.get("eval_n", eval_n)
    rows = []
    for recipe in spec.recipes:
        plain = per_cell.get((recipe, "plain"), {})
        plain_after = {k: s["heldout_avg@n_after"] for k, s in plain.items()}
        for arm in spec.arms:
            cell = per_cell.get((recipe, arm), {})
            after = {k: s["heldout_avg@n_after"] for k, s in sorted(cell.items())}
            before = {k: s["heldout_avg@n_before"] for k, s in sorted(cell.items())}
            diff = (
                None
                if arm == "plain"
                else paired_difference_ci(after, plain_after, CI_LEVEL, DIFFERENCE_RANGE)
            )
            grad_var: dict[int, dict | None] = {}
            if ARMS[arm][1]:  # an RCC arm: its runs log the gradient-variance diagnostic
                dirs = run_dirs.get((recipe, arm), {})
                grad_var = {k: grad_var_summary(dirs[k] / METRICS_FILE) for k in after}
            ratios = {k: g["ratio_of_means"] for k, g in grad_var.items() if g is not None}
            row = {
                "recipe": recipe,
                "arm": arm,
                "label": recipe_label(recipe) + ARM_SUFFIX[arm],
                "seeds": sorted(after),
                "after": _ci_dict(after, UNIT_RANGE),
                "before": _ci_dict(before, UNIT_RANGE),
                "diff_vs_plain": diff.to_dict() if diff else None,
                "per_seed": {
                    str(k): {
                        "after": after[k],
                        "before": before[k],
                        "config_sha256": run_keys[(recipe, arm)][k],
                        "config": str(run_dirs[(recipe, arm)][k] / "config.yaml"),
                        "steps": cell[k].get("steps"),
                        "wall_seconds": cell[k].get("wall_seconds"),
                    }
                    for k in after
                },
            }
            if ARMS[arm][1]:
                row["grad_var_ratio"] = _ci_dict(ratios, (0.0, None))
                for k, summary in grad_var.items():
                    row["per_seed"][str(k)]["grad_var"] = summary
            rows.append(row)
    return {
        "metric": f"held-out avg@{eval_n}",
        "ci": f"{int(CI_LEVEL * 100)}% Student t interval over seeds, n-1 degrees of freedom",
        "difference": "mean over seeds of (arm - plain arm of the same recipe), paired by seed",
        "grad_var": GRAD_VAR_NOTE,
        "no_interval": ONE_SEED_NOTE if any(len(r["seeds"]) == 1 for r in rows) else None,
        "spec": dataclasses.asdict(spec),
        "rows": rows,
        "failed": failed,
        "busy": busy,
        "pending": pending,
    }


GRAD_VAR_NOTE = (
    "RCC arms: mean over the run's logged steps of diag/grad_var_rcc divided by the mean "
    "over the same steps of diag/grad_var_plain (a ratio of means, not the mean of the "
    "per-step diag/grad_var_ratio; docs/compare.md), per seed, then mean and t interval "
    "over seeds"
)


def grad_var_summary(metrics_file: Path) -> dict | None:
    """RCC's gradient-variance ratio of one run: ``sum_s v_rcc(s) / sum_s v_plain(s)`` over
    the steps ``s`` of ``metrics.jsonl`` that log both ``diag/grad_var_plain`` and
    ``diag/grad_var_rcc`` (the ratio of the mean variances; steps where every group
    collapsed, both 0, count as they are). Also the means themselves, the number of steps
    and, for comparison only, the mean of the per-step ratios over the steps with a
    positive plain variance. None when no step logs both or the plain mean is 0."""
    if not metrics_file.exists():
        return None
    plain, rcc = [], []
    for line in metrics_file.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        p, r = row.get("diag/grad_var_plain"), row.get("diag/grad_var_rcc")
        if isinstance(p, int | float) and isinstance(r, int | float):
            plain.append(float(p))
            rcc.append(float(r))
    if not plain or sum(plain) <= 0:
        return None
    step_ratios = [r / p for p, r in zip(plain, rcc, strict=True) if p > 0]
    return {
        "ratio_of_means": sum(rcc) / sum(plain),
        "mean_grad_var_plain": sum(plain) / len(plain),
        "mean_grad_var_rcc": sum(rcc) / len(rcc),
        "steps": len(plain),
        "mean_of_step_ratios": sum(step_ratios) / len(step_ratios),
    }


def _ci_dict(values: dict[int, float], bounds: Bounds) -> dict | None:
    return mean_ci(list(values.values()), CI_LEVEL, bounds).to_dict() if values else None


def _pct(ci: dict | None, signed: bool = False) -> str:
    """``78.1 ± 3.5`` in percentage points (± the CI half-width), ``78.1 (no interval)``
    for one seed, and the mean with "too few" where the interval would reach outside the
    metric's range (:func:`~contrastive_rlvr.stats.mean_text`)."""
    if ci is None:
        return "–"
    mean = f"{100 * ci['mean']:+.1f}" if signed else f"{100 * ci['mean']:.1f}"
    if ci["ci_half_width"] is None:
        return f"{mean} (no interval)"
    if ci.get("too_few"):
        return mean_text(ci, signed=signed)
    return f"{mean} ± {100 * ci['ci_half_width']:.1f}"


ONE_SEED_NOTE = (
    "One seed: no interval exists. A t interval estimates the spread between seeds from "
    "the values of at least two; with one seed there is no spread to estimate, so each "
    "number (and each Δ vs plain) is a single draw and says nothing on its own about "
    "whether the arms differ. Run at least two seeds (--seeds 0,1,2) for an interval."
)


def results_markdown(report: dict) -> str:
    """The markdown table (one row per recipe and arm) and how to read it."""
    metric = report["metric"]
    lines = [
        f"| Method | {metric} after RL (%) | Δ vs plain (pp) | SFT start (%) | seeds |",
        "|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        diff = "—" if row["arm"] == "plain" else _pct(row["diff_vs_plain"], signed=True)
        lines.append(
            f"| {row['label']} | {_pct(row['after'])} | {diff} | {_pct(row['before'])} | "
            f"{len(row['seeds'])} |"
        )
    lines += [
        "",
        f"Values in %, mean ± half-width of the {report['ci']}. Δ vs plain: "
        f"{report['difference']}, in percentage points, with its own t interval; an "
        "interval that contains 0 means no difference was shown at this number of seeds. "
        "SFT start: the same metric before RL.",
    ]
    if any(len(row["seeds"]) == 1 for row in report["rows"]):
        lines += ["", ONE_SEED_NOTE]
    lines += _grad_var_table(report["rows"])
    verdicts = _verdicts(report["rows"])
    if verdicts:
        lines += ["", *verdicts]
    if report.get("pending"):
        lines += ["", f"{report['pending']} run(s) still pending: this table is partial."]
    if report.get("interrupted"):
        lines += ["", "Interrupted (run compare again to resume):"]
        lines += [
            f"- {i['recipe']}/{i['arm']}/seed{i['seed']}" if "recipe" in i else f"- {i['stage']}"
            for i in report["interrupted"]
        ]
    if report.get("busy"):
        lines += ["", f"Left alone, {BUSY_NOTE}:"]
        lines += [f"- {b['recipe']}/{b['arm']}/seed{b['seed']}" for b in report["busy"]]
    if report["failed"]:
        lines += ["", "Failed runs (see their error.txt):"]
        lines += [f"- {f['recipe']}/{f['arm']}/seed{f['seed']}" for f in report["failed"]]
    return "\n".join(lines) + "\n"


def _grad_var_table(rows: list[dict]) -> list[str]:
    """The RCC arms' gradient-variance ratio of means (none: no lines)."""
    rcc_rows = [row for row in rows if "grad_var_ratio" in row]
    if not rcc_rows:
        return []
    lines = [
        "",
        "| Method | gradient variance RCC / plain (ratio of means) | logged steps | seeds |",
        "|---|---|---|---|",
    ]
    for row in rcc_rows:
        ci = row["grad_var_ratio"]
        if ci is None:
            value = "–"
        elif ci["ci_half_width"] is None:
            value = f"{ci['mean']:.3f} (1 seed: no interval)"
        else:
            value = f"{ci['mean']:.3f} ± {ci['ci_half_width']:.3f}"
        seeds = [s for s in row["per_seed"].values() if s.get("grad_var")]
        steps = sorted({s["grad_var"]["steps"] for s in seeds})
        if not steps:
            steps_text = "–"
        elif len(steps) == 1:
            steps_text = str(steps[0])
        else:
            steps_text = f"{steps[0]}-{steps[-1]}"
        lines.append(f"| {row['label']} | {value} | {steps_text} | {len(seeds)} |")
    lines += [
        "",
        "Gradient variance: mean over a run's logged steps of `diag/grad_var_rcc` over the "
        "mean over the same steps of `diag/grad_var_plain` (below 1: RCC lowered the "
        "estimated variance), per seed, then mean ± half-width of the t interval over seeds; "
        "logged steps: per seed (min-max).",
    ]
    return lines


def _verdicts(rows: list[dict]) -> list[str]:
    """One line per non-plain arm: helped, hurt, or no difference shown (CI contains 0)."""
    out = []
    for row in rows:
        d = row["diff_vs_plain"]
        if row["arm"] == "plain" or d is None or d["ci_half_width"] is None:
            continue
        if d["ci_low"] > 0:
            word = "higher than"
        elif d["ci_high"] < 0:
            word = "lower than"
        else:
            word = "not distinguishable from"
        out.append(f"- {row['label']}: {word} the plain arm ({_pct(d, signed=True)} pp).")
    return out


def child_main(argv: list[str], worker=None) -> None:
    """A child process of ``compare``: ends with its parent (Linux: the parent-death
    signal, :mod:`.child_processes`), then runs the worker command ``argv``
    (``worker``: :func:`_worker` unless given)."""
    die_with_parent()
    (worker or _worker)(argv)


if __name__ == "__main__":
    child_main(sys.argv[1:])
