"""Tabulate the step-1 clip fractions of BiCC runs (docs/bicc.md, "Ratio mode per recipe").

Reads ``OUT/<recipe>/<mode>/seed<k>/metrics.jsonl`` (one-step ``contrastive-rlvr train``
runs; ``mode`` is a folder name such as ``paper``, ``consistent`` or ``paper-mix1``),
prints one line per recipe and mode with the per-seed ``bicc/first_update_clip_frac`` and
their mean, then each seed's clip split, mean ratio and context, and writes the same as
``OUT/table.json``::

    python benchmarks/bicc_step1_clip.py OUT > OUT/table.txt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RECIPES = ("grpo", "dr_grpo", "dapo", "gmpo", "gspo", "conspo")
MODES = ("paper", "consistent", "paper-mix1")
DETAIL_KEYS = (
    "clip/low_frac",
    "clip/high_frac",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "ratio/mean",
    "bicc/context_tokens",
    "bicc/conditioned_frac",
    "reward/accuracy",
)


def first_lines(folder: Path) -> list[dict]:
    """The step-1 line of each seed's metrics.jsonl under ``folder`` (seed order)."""
    files = sorted(folder.glob("seed*/metrics.jsonl"), key=lambda f: int(f.parent.name[4:]))
    return [json.loads(f.read_text().splitlines()[0]) for f in files]


def main(out: Path) -> dict:
    table = {}
    for recipe in RECIPES:
        for mode in MODES:
            lines = first_lines(out / recipe / mode)
            if not lines:
                continue
            clip = [line.get("bicc/first_update_clip_frac") for line in lines]
            known = [c for c in clip if c is not None]
            mean = sum(known) / len(known) if known else None
            table[f"{recipe}/{mode}"] = {
                "clip": clip,
                "mean": mean,
                "loss": [line.get("loss") for line in lines],
                "detail": [{k: line[k] for k in DETAIL_KEYS if k in line} for line in lines],
            }
            shown = [None if c is None else round(c, 4) for c in clip]
            mean_text = "-" if mean is None else f"{mean:.4f}"
            print(f"{recipe:8s} {mode:11s} clip {shown} mean {mean_text}")
            for detail in table[f"{recipe}/{mode}"]["detail"]:
                print("     ", {k: round(v, 4) for k, v in detail.items()})
    (out / "table.json").write_text(json.dumps(table, indent=1) + "\n")
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder of the one-step runs (OUT/<recipe>/...)")
    main(parser.parse_args().out)
