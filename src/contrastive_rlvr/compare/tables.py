"""``compare``'s results: per recipe and arm, the held-out avg@n after RL and at the SFT
start with their t intervals over seeds, the paired difference to the plain arm, RCC's
gradient-variance ratio (:func:`build_results`), and the markdown table
(:func:`results_markdown`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..redaction import redact
from ..run_files import read_jsonl
from ..stats import (
    DIFFERENCE_RANGE,
    UNIT_RANGE,
    Bounds,
    mean_ci,
    mean_text,
    paired_difference_ci,
)
from .spec import ARM_SUFFIX, ARMS, BUSY_NOTE, CompareSpec, RunResult, recipe_label

CI_LEVEL = 0.95
METRICS_FILE = "metrics.jsonl"


def build_results(results: list[RunResult], spec: CompareSpec, *, pending: int = 0) -> dict:
    """Per-seed values and, per recipe and arm, mean and t interval of the held-out
    avg@n after RL, of the SFT start, and of the paired difference to the plain arm."""
    per_cell: dict[tuple[str, str], dict[int, dict]] = {}
    run_dirs: dict[tuple[str, str], dict[int, Path]] = {}
    run_keys: dict[tuple[str, str], dict[int, str]] = {}
    bicc_forms: dict[tuple[str, str], set[str]] = {}
    failed, busy = [], []
    eval_n = None
    for res in results:
        if res.run.bicc:
            bicc_forms.setdefault((res.run.recipe, res.run.arm), set()).add(res.run.bicc)
        if res.status in ("interrupted", "pending"):
            continue
        if res.status == "busy":
            busy.append(
                {
                    "recipe": res.run.recipe,
                    "arm": res.run.arm,
                    "seed": res.run.seed,
                    "folder": str(res.run.output_dir),
                }
            )
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
                "bicc_form": "; ".join(sorted(bicc_forms.get((recipe, arm), ()))) or None,
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
        "spec": redact(dataclasses.asdict(spec)),  # the secrets rule: no token in results
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
    for row in read_jsonl(metrics_file):  # a live run's torn last line dropped
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
    bicc_rows = [row for row in report["rows"] if row.get("bicc_form")]  # old results: no key
    forms = [f"- {row['label']}: {row['bicc_form']}" for row in bicc_rows]
    if forms:
        lines += ["", "BiCC's form in each BiCC arm (docs/bicc.md):", *forms]
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
