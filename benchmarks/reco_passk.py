"""ReCo vs GRPO on pass@k at large k, on the embedded task, over several seeds.

Runs ``contrastive-rlvr train`` for each arm and seed (skipping runs whose
``summary.json`` exists), then draws ``--n`` samples per held-out problem from
each run's last checkpoint (temperature 1, seeded) and reports pass@k for
k = 1, 2, 4, ..., n (unbiased estimator,
:func:`contrastive_rlvr.algorithms.pass_at_k`): per arm the mean over seeds
with a t interval, and the paired difference to GRPO (same seed = same SFT
start and held-out draws) with its t interval.

Arms (``--arms``, comma-separated):

- ``grpo``: the recipe alone;
- ``reco``: ReCo as configured by default (observed-occurrence weights,
  ``p(1-p)`` factor);
- ``reco_expected``: ``--reco_weights expected`` (1 / max(1, G pi_old(o)));
- ``reco_entropy``: ``--reco_factor entropy`` (next-token entropy factor);
- ``reco_expected_entropy``: both.

The entropy factor's Z (``reco_factor_norm`` mean) is the loss micro-batch's mean
entropy of the current policy (``docs/token-methods.md``).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reco_passk.py \\
        --out runs/reco-passk --seeds 0,1,2 --terms 5 --n 64 [--dry-run]

Cost on 2 shared CPU cores: one train run of the embedded default is a few
minutes; 5 arms x 3 seeds = 15 runs, then 15 x 200 x n samples.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.trainer_utils import get_last_checkpoint

from contrastive_rlvr.algorithms import pass_at_k
from contrastive_rlvr.embedded import (
    TaskConfig,
    heldout_correctness,
    load_char_tokenizer,
    make_datasets,
)
from contrastive_rlvr.stats import mean_ci, paired_difference_ci

ARMS: dict[str, tuple[str, ...]] = {
    "grpo": (),
    "reco": ("--reco", "true"),
    "reco_expected": ("--reco", "true", "--reco_weights", "expected"),
    "reco_entropy": ("--reco", "true", "--reco_factor", "entropy"),
    "reco_expected_entropy": (
        *("--reco", "true", "--reco_weights", "expected"),
        *("--reco_factor", "entropy"),
    ),
}
#: Completion budget per number of terms (the token-level method runs used 28 at 5 terms).
MAX_COMPLETION = {3: None, 4: None, 5: 28}


def train_command(arm: str, seed: int, terms: int, out: Path, extra: list[str]) -> list[str]:
    """The ``contrastive-rlvr train`` command line of one run."""
    cmd = [
        *(sys.executable, "-m", "contrastive_rlvr.cli", "train"),
        *("--output_dir", str(out / f"{arm}-s{seed}")),
        *("--recipe", "grpo", "--bicc", "false", "--rcc", "false"),
        *("--seed", str(seed), "--embedded_terms", str(terms)),
    ]
    if MAX_COMPLETION.get(terms):
        cmd += ["--max_completion_length", str(MAX_COMPLETION[terms])]
    return cmd + list(ARMS[arm]) + extra


def pass_at_ks(model_dir: Path, terms: int, n: int, seed: int, ks: list[int]) -> list[float]:
    """Mean over held-out problems of pass@k for each k."""
    tokenizer = load_char_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    _, heldout = make_datasets(TaskConfig(terms=terms))
    correct = heldout_correctness(model, tokenizer, heldout, n=n, seed=seed)
    return [sum(pass_at_k(n, sum(row), k) for row in correct) / len(correct) for k in ks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--terms", type=int, default=5)
    parser.add_argument("--n", type=int, default=64, help="samples per held-out problem")
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="print the train commands only")
    parser.add_argument("extra", nargs="*", help="more train options, after --")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; valid: {', '.join(ARMS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 128, args.n) if k <= args.n})
    torch.set_num_threads(1)

    for arm in arms:
        for seed in seeds:
            cmd = train_command(arm, seed, args.terms, args.out, args.extra)
            if args.dry_run:
                print(" ".join(cmd))
            elif not (args.out / f"{arm}-s{seed}" / "summary.json").exists():
                subprocess.run(cmd, check=True)
    if args.dry_run:
        return

    curves: dict[str, dict[int, list[float]]] = {}
    for arm in arms:
        curves[arm] = {}
        for seed in seeds:
            last = get_last_checkpoint(str(args.out / f"{arm}-s{seed}"))
            if last is None:
                raise ValueError(f"{args.out / f'{arm}-s{seed}'} holds no checkpoint-* directory")
            curves[arm][seed] = pass_at_ks(Path(last), args.terms, args.n, args.eval_seed, ks)
            print(json.dumps({"arm": arm, "seed": seed, "k": ks, "pass@k": curves[arm][seed]}))

    _print_tables(curves, arms, seeds, ks)


def _print_tables(
    curves: dict[str, dict[int, list[float]]], arms: list[str], seeds: list[int], ks: list[int]
) -> None:
    """The pass@k table of every arm (mean over seeds) and each arm's paired gap to GRPO."""
    print(f"\n| arm | {' | '.join(f'pass@{k}' for k in ks)} |")
    print("|---|" + "---|" * len(ks))
    for arm in arms:
        cells = []
        for j in range(len(ks)):
            ci = mean_ci([curves[arm][s][j] for s in seeds])
            half = "" if ci.half_width is None else f" ± {ci.half_width:.3f}"
            cells.append(f"{ci.mean:.3f}{half}")
        print(f"| {arm} | {' | '.join(cells)} |")
    if "grpo" in arms:
        print(f"\n| arm - grpo (paired by seed) | {' | '.join(f'pass@{k}' for k in ks)} |")
        print("|---|" + "---|" * len(ks))
        for arm in arms:
            if arm == "grpo":
                continue
            cells = []
            for j in range(len(ks)):
                ci = paired_difference_ci(
                    {s: curves[arm][s][j] for s in seeds}, {s: curves["grpo"][s][j] for s in seeds}
                )
                half = "" if ci.half_width is None else f" ± {ci.half_width:.3f}"
                cells.append(f"{ci.mean:+.3f}{half}")
            print(f"| {arm} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
