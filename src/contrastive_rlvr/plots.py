"""``contrastive-rlvr plot``: PNG figures of training runs (matplotlib, Agg backend).

Reads each run folder's ``config.yaml``, ``metrics.jsonl``, ``deltas.jsonl`` and
``summary.json`` (any may be missing; what it feeds is then left out). Runs are
grouped by recipe and arm (plain, +BiCC, +RCC, +BiCC+RCC); curves are the mean
over the runs (seeds) of a group, with the min-max band when there are
several. One figure of each kind per recipe:

- ``curves_<recipe>.png``: reward and training accuracy per step (moving
  average), held-out avg@n before and after RL as markers;
- ``cov_<recipe>.png``: Cov(R, delta) per step (``rcc/cov``);
- ``deltas_<recipe>.png``: delta distributions of correct vs wrong completions
  at early, middle and late steps (the BiCC paper's Figures 2 and 4);
- ``gradvar_<recipe>.png``: gradient-variance estimate with the plain and with
  the RCC baseline, and their ratio per step (``diag/grad_var_*``) with the
  ratio of means over steps and its t interval over seeds (compare's table);
- ``ratio_margin_<recipe>.png``: ``diag/ratio_margin`` per step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import yaml

from .compare import ARM_SUFFIX, ARMS, CI_LEVEL, grad_var_summary, recipe_label
from .run_files import open_atomic, read_json, read_jsonl, read_text
from .stats import MeanCI, mean_ci

ARM_COLORS = {"plain": "tab:blue", "bicc": "tab:orange", "rcc": "tab:green", "bicc+rcc": "tab:red"}
#: Windows of training (shares of the last step) for the early / middle / late distributions.
PHASES = (("early", 0.0, 0.1), ("middle", 0.45, 0.55), ("late", 0.9, 1.0))
#: Moving-average window as a share of the number of steps (at least 1 step).
SMOOTH_SHARE = 1 / 30
DPI = 120
#: Smallest x range of a delta histogram (all-equal deltas would give zero-width bins).
MIN_HIST_RANGE = 1e-3
#: A recipe name used as it is in a file name: letters, digits, ``_ . + -``, no ``..``.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
#: What a foreign or broken run folder can raise where its contents are read.
_READ_ERRORS = (KeyError, TypeError, AttributeError, IndexError, ValueError, yaml.YAMLError)


class NoRunFolders(ValueError):
    """No run folder (with metrics.jsonl) under the paths given."""


def file_part(name: str) -> str:
    """``name`` (read from a run folder: data, never a path) as part of a file name: itself
    when it is a plain name (:data:`_PLAIN_NAME`), else its letters, digits and ``_+-``
    with a short hash of the whole appended, so that it names a file in the figures folder
    and nowhere else (no ``/``, no ``..``) and two names stay two files."""
    if _PLAIN_NAME.match(name) and ".." not in name:
        return name
    kept = re.sub(r"[^A-Za-z0-9_+-]+", "_", name).strip("_")[:40] or "recipe"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{kept}-{digest}"


def _title(recipe: str) -> str:
    """The recipe's label in figure text (a ``$`` would start matplotlib's math mode)."""
    return recipe_label(recipe).replace("$", r"\$")


@dataclass
class Run:
    """What one run folder holds."""

    path: Path
    recipe: str
    arm: str
    seed: int
    metrics: list[dict] = field(default_factory=list)
    deltas: list[dict] = field(default_factory=list)
    summary: dict | None = None

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of one metrics.jsonl key (lines without it skipped)."""
        rows = [(m["step"], m[key]) for m in self.metrics if m.get(key) is not None]
        if not rows:
            return np.array([]), np.array([])
        steps, values = zip(*rows, strict=True)
        return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def _read_jsonl(path: Path) -> list[dict]:
    """The rows of a run's JSON-lines log (``run_files.read_jsonl``: a regular file, a
    bounded size, the torn last line of a live run dropped, errors naming file and line)."""
    if not path.exists() and not path.is_symlink():
        return []
    return read_jsonl(path, objects=False)  # each row is checked by the caller


def load_run(path: str | Path) -> Run:
    """A run folder (it must hold config.yaml or summary.json, and metrics.jsonl). What it
    holds is checked as it is read: a folder of another tool, or one this version cannot
    read, is a ``ValueError`` naming the folder and what is wrong, never a traceback."""
    path = Path(path)
    try:
        return _load_run(path)
    except _READ_ERRORS as err:
        detail = str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
        raise ValueError(
            f"{path} is not a run folder this version of contrastive-rlvr can read ({detail})"
        ) from err


def _load_run(path: Path) -> Run:
    config_file, summary_file = path / "config.yaml", path / "summary.json"
    summary = read_json(summary_file) if summary_file.exists() else None
    if summary is not None and not isinstance(summary, dict):
        raise ValueError(f"{summary_file.name} holds a {type(summary).__name__}, not a mapping")
    if config_file.exists():
        cfg = yaml.safe_load(read_text(config_file)) or {}
    elif summary is not None:
        cfg = summary
    else:
        raise ValueError("no config.yaml or summary.json")
    if not isinstance(cfg, dict):
        raise ValueError(f"its config holds a {type(cfg).__name__}, not a mapping of fields")
    kinds = {"recipe": str, "bicc": bool, "rcc": bool}
    for name, kind in kinds.items():
        if not isinstance(cfg.get(name), kind):
            raise ValueError(f"its config has no {kind.__name__} {name!r} field")
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"its config's seed is {seed!r}, not an integer")
    arm = next(a for a, flags in ARMS.items() if flags == (cfg["bicc"], cfg["rcc"]))
    metrics = _read_jsonl(path / "metrics.jsonl")
    deltas = _read_jsonl(path / "deltas.jsonl")
    _check_rows(path, metrics, deltas)
    if summary is not None and not _has_heldout(summary):
        summary = None  # no held-out values (another tool's file): no before/after markers
    return Run(
        path=path,
        recipe=cfg["recipe"],
        arm=arm,
        seed=seed,
        metrics=metrics,
        deltas=deltas,
        summary=summary,
    )


def _check_rows(path: Path, metrics: list, deltas: list) -> None:
    """The rows of a run's logs are what this version writes: a mapping with an integer
    step, numbers in metrics, equal lists in deltas; else a ``ValueError`` naming the
    file, the row and the key."""
    for name, rows in (("metrics.jsonl", metrics), ("deltas.jsonl", deltas)):
        for number, row in enumerate(rows, start=1):
            if not isinstance(row, dict) or not _is_int(row.get("step")):
                raise ValueError(f"{name} row {number} is not a mapping with an integer step")
    for number, row in enumerate(metrics, start=1):
        for key, value in row.items():  # a run logs numbers only (MetricsJsonl)
            number_like = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not number_like:
                raise ValueError(
                    f"{path / 'metrics.jsonl'} row {number}: {key}={value!r} is not a number"
                )
    for number, row in enumerate(deltas, start=1):
        if "delta" in row and not (
            isinstance(row["delta"], list)
            and isinstance(row.get("rewards"), list)
            and len(row["rewards"]) == len(row["delta"])
        ):
            raise ValueError(f"deltas.jsonl row {number}: delta and rewards are not equal lists")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _has_heldout(summary: dict) -> bool:
    """Whether a summary holds the held-out values (and step count) a figure reads."""
    values = [summary.get(f"heldout_avg@n_{w}") for w in ("before", "after")]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return numbers and (summary.get("steps") is None or _is_int(summary["steps"]))


def find_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Run folders among ``paths``: each path is a run folder (has metrics.jsonl) or a
    folder searched for them (e.g. a compare output folder; its sft-cache is skipped)."""
    runs = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise ValueError(f"{p} is not a folder")
        if (p / "metrics.jsonl").exists():
            runs.append(load_run(p))
            continue
        found = sorted(m.parent for m in p.rglob("metrics.jsonl") if "sft-cache" not in m.parts)
        runs += [load_run(d) for d in found if "checkpoint-" not in d.name]
    if not runs:
        raise NoRunFolders(f"no run folder (with metrics.jsonl) under {', '.join(map(str, paths))}")
    return runs


def _label(recipe: str, arm: str) -> str:
    return _title(recipe) + ARM_SUFFIX[arm]


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if window <= 1 or values.size == 0:
        return values
    csum = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, values.size + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def _smoothed(window: int) -> str:
    """The axis label's note on :func:`_smooth` (none for a window of one step)."""
    return f" (moving average, {window} steps)" if window > 1 else ""


def _mean_band(runs: Sequence[Run], key: str, window: int = 1):
    """Every step any run logged ``key`` at, and at each the mean, min and max of the
    smoothed series over the runs that logged it there, and how many did.

    A union, not the steps common to all runs: a probe that measured nothing on one seed
    (``bicc/transfer_cos`` in a micro-batch with no signal) or a run that stopped early
    would otherwise remove that step from every seed's line.

    Returns ``(steps, mean, low, high, counts)``, each of shape ``(S,)``, or None."""
    series = [r.series(key) for r in runs]
    series = [(s, _smooth(v, window)) for s, v in series if s.size]
    if not series:
        return None
    steps = np.unique(np.concatenate([s for s, _ in series]))
    at = [[v[s == step][:1] for s, v in series] for step in steps]  # a run's first, if twice
    values = [np.concatenate(parts) for parts in at]
    return (
        steps,
        np.array([v.mean() for v in values]),
        np.array([v.min() for v in values]),
        np.array([v.max() for v in values]),
        np.array([v.size for v in values]),
    )


def _plot_band(ax, runs, key, arm, window=1, label=None) -> bool:
    band = _mean_band(runs, key, window)
    if band is None:
        return False
    steps, mean, lo, hi, counts = band
    if label is not None and counts.min() < len(runs):
        label = f"{label}, {counts.min()}-{counts.max()} of them a step"
    color = ARM_COLORS[arm]
    ax.plot(steps, mean, color=color, label=label, lw=1.5)
    if len(runs) > 1:
        ax.fill_between(steps, lo, hi, color=color, alpha=0.15, lw=0)
    return True


def _groups(runs: list[Run]) -> dict[str, dict[str, list[Run]]]:
    """recipe -> arm -> runs, arms in the canonical order."""
    out: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        out.setdefault(r.recipe, {}).setdefault(r.arm, []).append(r)
    return {rec: {a: arms[a] for a in ARMS if a in arms} for rec, arms in out.items()}


def _seeds_note(runs: Sequence[Run]) -> str:
    return f"{len(runs)} seed{'s' if len(runs) > 1 else ''}"


def _finish(fig, path: Path) -> Path:
    """Save ``fig`` as ``path`` through ``run_files`` (whole, umask mode, under the
    folder's lock; a link or a file no run wrote at ``path`` refused, never followed)."""
    fig.tight_layout()
    try:
        with open_atomic(path.parent, path.name, "wb") as f:
            fig.savefig(f, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path


def plot_curves(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """Reward and training accuracy per step, held-out before/after as markers."""
    max_step = max((m["step"] for rs in arms.values() for r in rs for m in r.metrics), default=0)
    if max_step == 0:
        return None
    window = max(1, round(max_step * SMOOTH_SHARE))
    fig, (ax_r, ax_a) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm, runs in arms.items():
        label = f"{_label(recipe, arm)} ({_seeds_note(runs)})"
        _plot_band(ax_r, runs, "reward", arm, window, label)
        _plot_band(ax_a, runs, "reward/accuracy", arm, window, f"{label}, training")
        done = [r.summary for r in runs if r.summary]
        if done:
            before = np.mean([s["heldout_avg@n_before"] for s in done])
            after = np.mean([s["heldout_avg@n_after"] for s in done])
            last = max(s.get("steps", max_step) for s in done)
            ax_a.plot([0], [before], marker="o", ls="", color=ARM_COLORS[arm], mfc="white")
            ax_a.plot([last], [after], marker="*", ms=12, ls="", color=ARM_COLORS[arm])
    ax_a.plot([], [], marker="o", ls="", color="gray", mfc="white", label="held-out, before RL")
    ax_a.plot([], [], marker="*", ms=12, ls="", color="gray", label="held-out, after RL")
    ax_r.set(xlabel="step", ylabel=f"mean reward{_smoothed(window)}")
    ax_r.set_title(f"{_title(recipe)}: training reward")
    ax_a.set(xlabel="step", ylabel="accuracy")
    ax_a.set_title(f"{_title(recipe)}: training accuracy and held-out avg@n")
    for ax in (ax_r, ax_a):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    return _finish(fig, out / f"curves_{file_part(recipe)}.png")


def plot_cov(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """Cov(R, delta) per step, one line per arm."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    max_step = max((m["step"] for rs in arms.values() for r in rs for m in r.metrics), default=1)
    window = max(1, round(max_step * SMOOTH_SHARE))
    drawn = [
        _plot_band(ax, runs, "rcc/cov", arm, window, f"{_label(recipe, arm)} ({_seeds_note(runs)})")
        for arm, runs in arms.items()
    ]
    if not any(drawn):
        plt.close(fig)
        return None
    ax.axhline(0, color="black", lw=0.7)
    ax.set(xlabel="step", ylabel=f"mean over groups of Cov(R, δ){_smoothed(window)}")
    ax.set_title(f"{_title(recipe)}: Cov(R, δ), δ = mean_t log π_θ/π_ref")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(fig, out / f"cov_{file_part(recipe)}.png")


def plot_transfer(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """``bicc/transfer_cos`` per probed step, one line per arm (BiCC arms only; docs/bicc.md,
    "Does BiCC reach the policy that samples?")."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = [
        _plot_band(
            ax, runs, "bicc/transfer_cos", arm, 1, f"{_label(recipe, arm)} ({_seeds_note(runs)})"
        )
        for arm, runs in arms.items()
    ]
    if not any(drawn):
        plt.close(fig)
        return None
    ax.axhline(0, color="black", lw=0.7)
    ax.axhline(1, color="grey", lw=0.5, ls="--")
    ax.set(xlabel="step", ylabel="cosine with plain GRPO's gradient on the plain prompt")
    ax.set_title(f"{_title(recipe)}: does the update reach the sampling policy?")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(fig, out / f"transfer_{file_part(recipe)}.png")


def phase_deltas(runs: Sequence[Run]) -> dict[str, dict[str, np.ndarray]]:
    """Pooled deltas of correct and wrong completions in each phase of :data:`PHASES`.

    A completion is correct when its reward is above the run's threshold (0.5;
    the runs record rewards, and the embedded task's are 0/1). Steps where every
    delta is 0 (the policy still equal to the reference) are left out."""
    last = max((d["step"] for r in runs for d in r.deltas), default=0)
    out = {}
    for name, lo, hi in PHASES:
        correct, wrong = [], []
        for r in runs:
            for d in r.deltas:
                if "delta" not in d or not lo * last <= d["step"] <= hi * last:
                    continue
                rewards, delta = np.asarray(d["rewards"]), np.asarray(d["delta"])
                if not delta.any():
                    continue  # the first step: the policy still is the reference, delta = 0
                correct.append(delta[rewards > 0.5])
                wrong.append(delta[rewards <= 0.5])
        out[name] = {
            "correct": np.concatenate(correct) if correct else np.array([]),
            "wrong": np.concatenate(wrong) if wrong else np.array([]),
            "steps": (round(lo * last), round(hi * last)),
        }
    return out


def plot_deltas(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """Histograms of delta for correct vs wrong completions: rows arms, columns phases."""
    arms = {a: rs for a, rs in arms.items() if any(r.deltas for r in rs)}
    if not arms:
        return None
    fig, axes = plt.subplots(
        len(arms), len(PHASES), figsize=(4.2 * len(PHASES), 2.8 * len(arms)), squeeze=False
    )
    for row, (arm, runs) in enumerate(arms.items()):
        phases = phase_deltas(runs)
        for col, (name, _, _) in enumerate(PHASES):
            ax, data = axes[row][col], phases[name]
            both = np.concatenate([data["correct"], data["wrong"]])
            if both.size == 0:
                ax.set_axis_off()
                continue
            lo_edge, hi_edge = both.min(), both.max()
            if hi_edge - lo_edge < MIN_HIST_RANGE:
                lo_edge, hi_edge = lo_edge - MIN_HIST_RANGE / 2, hi_edge + MIN_HIST_RANGE / 2
            edges = np.linspace(lo_edge, hi_edge, 31)
            for key, color in (("correct", "tab:green"), ("wrong", "tab:red")):
                values = data[key]
                if values.size:
                    ax.hist(
                        values,
                        bins=edges,
                        density=True,
                        alpha=0.5,
                        color=color,
                        label=f"{key} (n={values.size}, mean {values.mean():+.3f})",
                    )
            lo, hi = data["steps"]
            ax.set_title(f"{_label(recipe, arm)}: {name} (steps {lo}-{hi})", fontsize=9)
            ax.set_xlabel("δ = mean_t (log π_θ − log π_ref)")
            ax.set_ylabel("density")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    fig.suptitle(
        f"{_title(recipe)}: δ of correct vs wrong completions "
        "(pooled over seeds and the steps of each window)"
    )
    return _finish(fig, out / f"deltas_{file_part(recipe)}.png")


def gradvar_ratio_of_means(runs: Sequence[Run]) -> tuple[str, MeanCI | None]:
    """The table's number (compare's ``grad_var_ratio``): per run the ratio of means
    ``sum_s v_rcc(s) / sum_s v_plain(s)`` over its logged steps, then the mean and t
    interval over runs (seeds). Returns the legend text and the interval (None: no run
    logs a positive plain variance). One run: no interval exists (a t interval needs
    two seeds), and the text says so."""
    ratios = [
        g["ratio_of_means"]
        for g in (grad_var_summary(r.path / "metrics.jsonl") for r in runs)
        if g is not None
    ]
    if not ratios:
        return "no ratio (plain variance 0 on every logged step)", None
    ci = mean_ci(ratios, CI_LEVEL)
    if ci.half_width is None:
        return f"ratio of means {ci.mean:.3f} (1 seed: no interval)", ci
    level = int(CI_LEVEL * 100)
    return (
        f"ratio of means {ci.mean:.3f}, {level}% CI [{ci.low:.3f}, {ci.high:.3f}] ({ci.n} seeds)",
        ci,
    )


def plot_gradvar(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """Gradient-variance estimate with the plain and the RCC baseline, and their ratio."""
    if not any(r.series("diag/grad_var_plain")[0].size for rs in arms.values() for r in rs):
        return None
    fig, (ax_v, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm, runs in arms.items():
        band_p = _mean_band(runs, "diag/grad_var_plain")
        band_r = _mean_band(runs, "diag/grad_var_rcc")
        if band_p is None or band_r is None:
            continue
        color, name = ARM_COLORS[arm], _label(recipe, arm)
        ax_v.plot(band_p[0], band_p[1], color=color, ls="-", marker=".", label=f"{name}: plain b")
        ax_v.plot(band_r[0], band_r[1], color=color, ls="--", marker="x", label=f"{name}: RCC b*")
        ratio_text, ci = gradvar_ratio_of_means(runs)
        band = _mean_band(runs, "diag/grad_var_ratio")
        if band is not None:
            ax_r.plot(
                band[0],
                band[1],
                color=color,
                marker="o",
                ms=3,
                alpha=0.6,
                label=f"{name}: per step ({_seeds_note(runs)})",
            )
            if len(runs) > 1:
                ax_r.fill_between(band[0], band[2], band[3], color=color, alpha=0.1, lw=0)
        if ci is not None:
            ax_r.axhline(ci.mean, color=color, ls="--", lw=1.5, label=f"{name}: {ratio_text}")
            if ci.half_width is not None:
                ax_r.axhspan(ci.low, ci.high, color=color, alpha=0.15, lw=0)
    positive = [line.get_ydata() for line in ax_v.get_lines()]
    if positive and all(np.all(np.asarray(y) > 0) for y in positive):
        ax_v.set_yscale("log")  # the variances span orders of magnitude over training
    ax_v.set(xlabel="step", ylabel="Var over groups of projected gradient (mean of directions)")
    ax_v.set_title(f"{_title(recipe)}: gradient variance, same batch")
    ax_r.axhline(1.0, color="black", lw=0.7)
    ax_r.set(xlabel="step", ylabel="variance with RCC / without")
    ax_r.set_title("RCC / plain (< 1: RCC lowers the variance); dashed: ratio of means")
    for ax in (ax_v, ax_r):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _finish(fig, out / f"gradvar_{file_part(recipe)}.png")


def plot_ratio_margin(recipe: str, arms: dict[str, list[Run]], out: Path) -> Path | None:
    """Ratio margin (correct minus wrong) of each diagnostics step."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = [
        _plot_band(ax, runs, "diag/ratio_margin", arm, 1, f"{_label(recipe, arm)}")
        for arm, runs in arms.items()
    ]
    if not any(drawn):
        plt.close(fig)
        return None
    ax.axhline(0, color="black", lw=0.7)
    ax.set(xlabel="step", ylabel="mean ratio (correct) − mean ratio (wrong)")
    ax.set_title(f"{_title(recipe)}: one update's sequence-ratio margin", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(fig, out / f"ratio_margin_{file_part(recipe)}.png")


def plot_runs(
    paths: Iterable[str | Path], out: str | Path, *, require_steps: bool = True
) -> list[Path]:
    """Every figure for the runs under ``paths``, written to ``out``; returns the files.
    File names are built from the runs' recipes through :func:`file_part`, so every file
    is written in ``out`` whatever a run folder's config.yaml says. Runs that log no step
    at all (an empty ``metrics.jsonl``) are an error unless ``require_steps=False`` (the
    report, which shows their other sections): nothing would be drawn, without a word."""
    runs = find_runs(list(paths))
    if require_steps and not any(r.metrics for r in runs):
        raise ValueError(
            f"nothing to plot: {', '.join(str(r.path) for r in runs)} log no step "
            "(metrics.jsonl is empty or absent: the run stopped before its first logged step)"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for recipe, arms in _groups(runs).items():
        makers = (
            plot_curves,
            plot_cov,
            plot_transfer,
            plot_deltas,
            plot_gradvar,
            plot_ratio_margin,
        )
        for make in makers:
            try:
                path = make(recipe, arms, out)
            except _READ_ERRORS as err:
                folders = ", ".join(str(r.path) for rs in arms.values() for r in rs)
                raise ValueError(
                    f"{make.__name__} could not draw the runs {folders} (values this version "
                    f"of contrastive-rlvr cannot read: {type(err).__name__}: {err})"
                ) from err
            if path is not None:
                written.append(path)
    return written
