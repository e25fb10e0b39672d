"""The tables of docs/results/smollm2-bicc-vs-plain/README.md from the run folders.

    PYTHONPATH=src .venv/bin/python docs/results/smollm2-bicc-vs-plain/aggregate.py \
        RUN_SH_OUT VARIANTS_OUT [--json FILE]

Reads ``<folder>/grpo/<arm>/seed<k>/summary.json`` (held-out avg@2 before and after RL,
with the counts) and ``metrics.jsonl`` (BiCC's context, clipping, gradient norm) of every
finished run; prints per seed and arm the score after RL, the mean with its 95% Student
t interval over seeds, and differences paired by seed to plain GRPO and to the default
BiCC arm (seeds where both arms finished).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contrastive_rlvr.stats import mean_ci, paired_difference_ci

PLAIN, DEFAULT = "plain GRPO", "GRPO + BiCC (partition, paper ratio)"


def arms(main: Path, variants: Path) -> dict[str, Path]:
    """label -> the folder holding that arm's seed<k>/ runs"""
    return {
        PLAIN: main / "compare" / "grpo" / "plain",
        DEFAULT: main / "compare" / "grpo" / "bicc",
        "BiCC one_opposite": variants / "one_opposite" / "grpo" / "bicc",
        "BiCC conditioned_old": variants / "conditioned_old" / "grpo" / "bicc",
    }


def read_run(folder: Path) -> dict | None:
    try:
        s = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if s.get("error") or s.get("steps") is None:
        return None
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "grad_norm" in r]
    out = {
        "after": s["heldout_avg@n_after"],
        "before": s["heldout_avg@n_before"],
        "correct_after": s["heldout_after"]["correct"],
        "samples": s["heldout_after"]["samples"],
        "steps": s["steps"],
        "grad_norm_max": max(r["grad_norm"] for r in steps),
        "reward_mean": sum(r["reward"] for r in steps) / len(steps),
    }
    for name in ("context_tokens", "whole_attempts", "cut_attempts", "conditioned_frac"):
        values = [r[f"bicc/{name}"] for r in steps if f"bicc/{name}" in r]
        if values:
            out[name] = sum(values) / len(values)
    return out


def collect(paths: dict[str, Path]) -> dict[str, dict[int, dict]]:
    table: dict[str, dict[int, dict]] = {}
    for label, folder in paths.items():
        table[label] = {}
        for seed_dir in sorted(folder.glob("seed*")):
            run = read_run(seed_dir)
            if run is not None:
                table[label][int(seed_dir.name.removeprefix("seed"))] = run
    return table


def pct(ci, signed: bool = False) -> str:
    if ci is None:
        return "-"
    sign = "+" if signed else ""
    if ci.half_width is None:
        return f"{100 * ci.mean:{sign}.1f} (n={ci.n}, no interval)"
    return f"{100 * ci.mean:{sign}.1f} +- {100 * ci.half_width:.1f} (n={ci.n})"


def markdown(table: dict[str, dict[int, dict]]) -> str:
    seeds = sorted({k for runs in table.values() for k in runs})
    after = {label: {k: r["after"] for k, r in runs.items()} for label, runs in table.items()}
    lines = [
        "| arm | " + " | ".join(f"seed {k}" for k in seeds)
        + " | mean | vs plain (pp) | vs default BiCC (pp) |",
        "|---|" + "---|" * (len(seeds) + 3),
    ]
    for label, runs in table.items():
        if not runs:
            continue
        cells = [
            f"{100 * runs[k]['after']:.1f} ({runs[k]['correct_after']}/{runs[k]['samples']})"
            if k in runs else "-"
            for k in seeds
        ]  # fmt: skip
        mean = mean_ci(list(after[label].values()))
        vs_plain = paired_difference_ci(after[label], after[PLAIN]) if label != PLAIN else None
        vs_default = (
            paired_difference_ci(after[label], after[DEFAULT]) if label not in (PLAIN, DEFAULT)
            else None
        )  # fmt: skip
        lines.append(
            f"| {label} | " + " | ".join(cells)
            + f" | {pct(mean)} | {pct(vs_plain, True)} | {pct(vs_default, True)} |"
        )  # fmt: skip
    starts = {k: r["before"] for runs in table.values() for k, r in runs.items()}
    lines.append(
        "| before RL (all arms) | " + " | ".join(f"{100 * starts[k]:.1f}" for k in seeds)
        + f" | {pct(mean_ci(list(starts.values())))} | | |"
    )  # fmt: skip
    lines += [
        "",
        "| arm | training reward (mean over steps) | max grad norm | context tokens "
        "| whole attempts | cut attempts | conditioned rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, runs in table.items():
        if not runs:
            continue

        def avg(key: str, runs: dict = runs) -> str:
            values = [r[key] for r in runs.values() if key in r]
            return f"{sum(values) / len(values):.2f}" if values else "-"

        lines.append(
            f"| {label} | {avg('reward_mean')} | {avg('grad_norm_max')} | "
            f"{avg('context_tokens')} | {avg('whole_attempts')} | {avg('cut_attempts')} | "
            f"{avg('conditioned_frac')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("main", type=Path, help="run.sh's output folder")
    parser.add_argument("variants", type=Path, help="run_variants.sh's output folder")
    parser.add_argument("--json", type=Path, help="write the per-seed values here")
    args = parser.parse_args()
    table = collect(arms(args.main, args.variants))
    print(markdown(table))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
