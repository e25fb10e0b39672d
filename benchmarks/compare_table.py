"""Rebuild ``compare``'s table from a finished matrix folder without running anything or
writing into it: ``python benchmarks/compare_table.py OUT --recipes grpo,dapo --seeds 0,1,2``
prints ``results.md`` as the current code writes it (e.g. the RCC arms' gradient-variance
ratio of means, for a matrix made before that column existed) and, with ``--json FILE``,
writes ``results.json`` there."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.run.folder import SUMMARY_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--recipes", default=",".join(cmp.registered_recipes()))
    parser.add_argument("--arms", default=",".join(cmp.ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    spec = cmp.make_spec(
        recipes=args.recipes, arms=args.arms, seeds=args.seeds, output_dir=args.out
    )
    results = []
    for recipe in spec.recipes:
        for arm in spec.arms:
            for seed in spec.seeds:
                run = cmp.RunSpec(recipe, arm, seed, args.out / recipe / arm / f"seed{seed}")
                summary_file = run.output_dir / SUMMARY_FILE
                summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
                status = "skipped" if summary is not None else "failed"
                results.append(cmp.RunResult(run, status, summary=summary))
    report = cmp.build_results(results, spec)
    print(cmp.results_markdown(report), end="")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
