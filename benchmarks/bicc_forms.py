"""BiCC's forms against plain GRPO on one task: held-out avg@n after RL with paired 95% t
intervals over seeds, and the transfer measure of each form (docs/bicc.md, "Does BiCC
reach the policy that samples?"; docs/results/bicc-forms).

Each form is a ``contrastive-rlvr compare --arms plain,bicc`` matrix in ``OUT/<form>``
that reuses the plain arm and the warm starts of ``OUT/plain`` (copied in, so every form
is paired with the same GRPO runs and the same starts, seed by seed). Task flags after
``--`` go to every run (e.g. ``-- --embedded_hidden_ops true``). Runs that finished are
skipped, so the same command resumes; ``--table-only`` prints the table of what is there.

    python benchmarks/bicc_forms.py --out runs/forms --seeds 0,1,2,3,4 --max_steps 100
    python benchmarks/bicc_forms.py --out runs/forms-hidden -- --embedded_hidden_ops true
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

#: The forms compared, as ``compare`` overrides (the BiCC arm's; the plain arm is GRPO).
FORMS: dict[str, list[str]] = {
    "paper": ["--bicc_mix", "1.0", "--bicc_ratio_mode", "paper"],
    "consistent": ["--bicc_mix", "1.0", "--bicc_ratio_mode", "consistent"],
    "mix05": ["--bicc_mix", "0.5", "--bicc_ratio_mode", "paper"],
    "distill": ["--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_weight", "0.5"],
    "distill-w1": ["--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_weight", "1.0"],
    "distill-w01": ["--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_weight", "0.1"],
    "distill-both": ["--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_rows", "both"],
    "distill-ref": [
        "--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_teacher", "reference",
    ],
    "distill-gap1": [
        "--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_max_gap", "1.0",
    ],
    "distill-center": [
        "--bicc_form", "distill", "--bicc_mix", "1.0", "--bicc_distill_center", "true",
    ],
}  # fmt: skip


def compare(out: Path, arms: str, seeds: str, steps: int, extra: list[str]) -> int:
    cmd = [
        sys.executable, "-m", "contrastive_rlvr.cli", "compare", "--out", str(out),
        "--recipes", "grpo", "--arms", arms, "--seeds", seeds, "--max_steps", str(steps),
        *extra,
    ]  # fmt: skip
    with (out.parent / f"{out.name}.log").open("w") as log:
        return subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)


def run(args: argparse.Namespace) -> None:
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    plain = root / "plain"
    # bicc_mix 1.0 for the plain arm too: it is unread with BiCC off, and compare keys on it.
    if compare(plain, "plain", args.seeds, args.max_steps, ["--bicc_mix", "1.0", *args.task]):
        sys.exit(f"the plain arm failed: see {root / 'plain.log'}")
    for name in args.forms:
        out = root / name
        (out / "grpo").mkdir(parents=True, exist_ok=True)
        # a pretrained model (--model) has no warm start to share: no sft-cache
        if (plain / "sft-cache").exists() and not (out / "sft-cache").exists():
            shutil.copytree(plain / "sft-cache", out / "sft-cache")
        # seed by seed, so a later --seeds adds its plain runs too (compare reuses them)
        for seed in sorted((plain / "grpo" / "plain").glob("seed*")):
            dest = out / "grpo" / "plain" / seed.name
            if not dest.exists():
                shutil.copytree(seed, dest)
        rc = compare(out, "plain,bicc", args.seeds, args.max_steps, [*FORMS[name], *args.task])
        print(f"{name}: compare exit {rc} ({out}.log)", flush=True)


def transfer(out: Path) -> dict[str, float | None]:
    """Mean ``bicc/transfer_cos`` at the first probe and over every probe, and the mean
    ``bicc/distill_gap``, over the BiCC arm's seeds."""
    first, every, gaps = [], [], []
    for seed in sorted((out / "grpo" / "bicc").glob("seed*")):
        rows = [json.loads(line) for line in (seed / "metrics.jsonl").open() if line.strip()]
        probes = [r["bicc/transfer_cos"] for r in rows if "bicc/transfer_cos" in r]
        first += probes[:1]
        every += probes
        gaps += [r["bicc/distill_gap"] for r in rows if "bicc/distill_gap" in r]
    mean = lambda v: statistics.mean(v) if v else None  # noqa: E731
    return {"first": mean(first), "every": mean(every), "gap": mean(gaps)}


def _cell(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _pp(summary: dict, signed: bool = False) -> str:
    """A compare summary (mean, ci_half_width) in percentage points; one seed has no
    interval."""
    mean = f"{100 * summary['mean']:{'+' if signed else ''}.1f}"
    half = summary.get("ci_half_width")
    return f"{mean} (one seed: no interval)" if half is None else f"{mean} ± {100 * half:.1f}"


def table(root: Path, forms: list[str]) -> str:
    lines = [
        "| form | held-out avg@n after RL (%) | Δ vs GRPO (pp, paired) | seeds | transfer_cos, "
        "first probe | transfer_cos, all probes | distill gap (nats/token) |",
        "|---|---|---|---|---|---|---|",
    ]
    plain = json.loads((root / "plain" / "results.json").read_text())["rows"][0]
    after = plain["after"]
    lines.append(
        f"| GRPO | {_pp(after)} | — | "
        f"{after['n']} | – | – | – |"
    )
    for name in forms:
        path = root / name / "results.json"
        if not path.exists():
            continue
        rows = {r["arm"]: r for r in json.loads(path.read_text())["rows"]}
        if "bicc" not in rows or rows["bicc"]["after"] is None:
            continue
        arm, diff = rows["bicc"]["after"], rows["bicc"]["diff_vs_plain"]
        t = transfer(root / name)
        delta = "–" if diff is None else _pp(diff, signed=True)
        lines.append(
            f"| {name} (`{' '.join(FORMS[name])}`) | {_pp(arm)} | {delta} | {arm['n']} | "
            f"{_cell(t['first'])} | "
            f"{_cell(t['every'])} | {_cell(t['gap'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--max_steps", type=int, default=100)
    parser.add_argument(
        "--forms", default=",".join(FORMS), help="comma-separated: " + ", ".join(FORMS)
    )
    parser.add_argument("--table-only", action="store_true", help="print the table of OUT")
    parser.add_argument("task", nargs=argparse.REMAINDER, help="-- then flags for every run")
    args = parser.parse_args()
    args.forms = [f for f in args.forms.split(",") if f]
    unknown = [f for f in args.forms if f not in FORMS]
    if unknown:
        parser.error(f"--forms: unknown {unknown}; known: {', '.join(FORMS)}")
    args.task = [a for a in args.task if a != "--"]
    if not args.table_only:
        run(args)
    print(table(Path(args.out), args.forms))


if __name__ == "__main__":
    main()
