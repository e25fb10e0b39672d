"""The table of docs/results/bicc-variants/README.md from the run folders of run.sh.

    PYTHONPATH=src .venv/bin/python docs/results/bicc-variants/aggregate.py OUT [--json FILE]

Reads OUT/<folder>/grpo/<arm>/seed<k>/summary.json (held-out avg@4 before and after
RL) and metrics.jsonl (BiCC's context and clip fractions) of every finished run, and
prints per seed and arm the score after RL, then the mean with its 95% Student t
interval over seeds and the differences paired by seed to the default BiCC arm and to
plain GRPO (only seeds where both arms finished). --json writes the per-seed values.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contrastive_rlvr.stats import mean_ci, paired_difference_ci

#: label -> (folder, arm) as run.sh lays them out
ARMS = {
    "plain GRPO": ("default", "plain"),
    "BiCC default (partition, paper, mix 0.5)": ("default", "bicc"),
    "BiCC one_opposite (mix 0.5)": ("one_opposite", "bicc"),
    "BiCC conditioned_old (mix 1)": ("conditioned_old", "bicc"),
    "BiCC paper, mix 1 (conditioned_old's control)": ("paper_mix1", "bicc"),
}
DEFAULT, PLAIN = "BiCC default (partition, paper, mix 0.5)", "plain GRPO"


def read_run(folder: Path) -> dict | None:
    summary = folder / "summary.json"
    if not summary.exists():
        return None
    s = json.loads(summary.read_text())
    if s.get("error") or s.get("steps") is None:
        return None
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    # The project's loss logs clip/frac; TRL's own loss (which runs when every row is
    # conditioned, bicc_mix 1) logs the same fraction as clip_ratio/region_mean.
    key = "clip/frac" if "clip/frac" in rows[0] else "clip_ratio/region_mean"
    steps = [r for r in rows if key in r]
    out = {
        "after": s["heldout_avg@n_after"],
        "before": s["heldout_avg@n_before"],
        "steps": s["steps"],
    }
    if steps and "bicc/context_tokens" in steps[0]:
        out["clip_frac_step1"] = steps[0]["bicc/first_update_clip_frac"]
        out["clip_frac_mean"] = sum(r[key] for r in steps) / len(steps)
        for name in ("context_tokens", "whole_attempts", "cut_attempts", "conditioned_frac"):
            # mean over the steps that log it (a step without a mixed group logs no counts)
            values = [r[f"bicc/{name}"] for r in steps if f"bicc/{name}" in r]
            out[name] = sum(values) / len(values) if values else float("nan")
    return out


def collect(out: Path) -> dict[str, dict[int, dict]]:
    table: dict[str, dict[int, dict]] = {}
    for label, (folder, arm) in ARMS.items():
        table[label] = {}
        for seed_dir in sorted((out / folder / "grpo" / arm).glob("seed*")):
            run = read_run(seed_dir)
            if run is not None:
                table[label][int(seed_dir.name.removeprefix("seed"))] = run
    return table


def pct(ci, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if ci is None:
        return "-"
    if ci.half_width is None:
        return f"{100 * ci.mean:{sign}.1f} (n={ci.n})"
    return f"{100 * ci.mean:{sign}.1f} +- {100 * ci.half_width:.1f} (n={ci.n})"


def markdown(table: dict[str, dict[int, dict]]) -> str:
    seeds = sorted({k for runs in table.values() for k in runs})
    lines = [
        "| arm | " + " | ".join(f"seed {k}" for k in seeds) + " | mean | vs default BiCC (pp) "
        "| vs plain (pp) |",
        "|---|" + "---|" * (len(seeds) + 3),
    ]
    after = {label: {k: r["after"] for k, r in runs.items()} for label, runs in table.items()}
    for label, runs in table.items():
        cells = [f"{100 * runs[k]['after']:.1f}" if k in runs else "-" for k in seeds]
        mean = mean_ci(list(after[label].values())) if runs else None
        vs_default = (
            paired_difference_ci(after[label], after[DEFAULT]) if label != DEFAULT else None
        )
        vs_plain = paired_difference_ci(after[label], after[PLAIN]) if label != PLAIN else None
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {pct(mean)} | {pct(vs_default, True)} | {pct(vs_plain, True)} |"
        )
    starts = {k: r["before"] for runs in table.values() for k, r in runs.items()}
    lines.append(
        "| SFT start (all arms) | "
        + " | ".join(f"{100 * starts[k]:.1f}" for k in seeds)
        + f" | {pct(mean_ci(list(starts.values())))} | | |"
    )
    control = "BiCC paper, mix 1 (conditioned_old's control)"
    vs_control = paired_difference_ci(after["BiCC conditioned_old (mix 1)"], after[control])
    lines += ["", f"conditioned_old - its control (pp, paired by seed): {pct(vs_control, True)}"]
    lines += [
        "",
        "| arm | clipped tokens, step 1 | clipped tokens, mean | context tokens | "
        "whole attempts | cut attempts | conditioned rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, runs in table.items():
        if not runs or "clip_frac_step1" not in next(iter(runs.values())):
            continue

        def avg(key: str, runs: dict = runs) -> float:
            return sum(r[key] for r in runs.values()) / len(runs)

        lines.append(
            f"| {label} | {avg('clip_frac_step1'):.3f} | {avg('clip_frac_mean'):.3f} | "
            f"{avg('context_tokens'):.1f} | {avg('whole_attempts'):.2f} | "
            f"{avg('cut_attempts'):.2f} | {avg('conditioned_frac'):.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="run.sh's output folder")
    parser.add_argument("--json", type=Path, help="write the per-seed values here")
    args = parser.parse_args()
    table = collect(args.out)
    print(markdown(table))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
