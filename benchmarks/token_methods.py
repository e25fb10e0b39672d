"""The token-level methods' metrics of embedded-task runs: one table row per run directory.

For each ``contrastive-rlvr train`` output directory: held-out avg@n before and
after RL (``summary.json``), the means over steps of the VeriGate and OC-GRPO
metrics in ``metrics.jsonl`` (OC-GRPO's rescued share as total rescued groups
over total all-fail groups), and pass@k for k = 1..n on the held-out split,
n samples per problem from the last checkpoint (temperature 1, seeded), with
the unbiased estimator :func:`contrastive_rlvr.algorithms.pass_at_k`.

Usage: python benchmarks/token_methods.py runs/a runs/b [--terms 4] [--n 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
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

MEAN_KEYS = (
    "reward/accuracy",
    "adv/collapse_rate",
    "verigate/gated_frac",
    "verigate/collapse_rate_outcome",
    "verigate/collapse_rate",
    "oc/fail_frac",
    "reco/distinct_frac",
)


def metric_means(path: Path) -> dict[str, float]:
    """Means over logged steps of MEAN_KEYS, and OC-GRPO's run-level rescued share."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out = {}
    for key in MEAN_KEYS:
        values = [row[key] for row in lines if key in row]
        if values:
            out[key] = sum(values) / len(values)
    failed = sum(row.get("oc/fail_groups", 0.0) for row in lines)
    if failed:
        rescued = sum(row.get("oc/rescued_groups", 0.0) for row in lines)
        out["oc/fail_groups_total"] = failed
        out["oc/rescued_total"] = rescued
        out["oc/rescued_share"] = rescued / failed
    return out


def pass_at_ks(model_dir: Path, terms: int, n: int, seed: int) -> list[float]:
    """pass@k, k = 1..n, averaged over the held-out problems of the task."""
    tokenizer = load_char_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    _, heldout = make_datasets(TaskConfig(terms=terms))
    correct = heldout_correctness(model, tokenizer, heldout, n=n, seed=seed)
    return [
        sum(pass_at_k(n, sum(row), k) for row in correct) / len(correct) for k in range(1, n + 1)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--terms", type=int, default=3)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft", action="store_true", help="also pass@k of each run's SFT model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for run in args.runs:
        row = {"run": str(run)}
        summary = json.loads((run / "summary.json").read_text())
        row["avg@n_before"] = summary["heldout_avg@n_before"]
        row["avg@n_after"] = summary["heldout_avg@n_after"]
        row.update(metric_means(run / "metrics.jsonl"))
        last = get_last_checkpoint(str(run))
        if last is None:
            raise ValueError(f"{run} holds no checkpoint-* directory")
        row["pass@k"] = [round(x, 4) for x in pass_at_ks(Path(last), args.terms, args.n, args.seed)]
        if args.sft:
            sft = pass_at_ks(run / "sft-model", args.terms, args.n, args.seed)
            row["sft_pass@k"] = [round(x, 4) for x in sft]
        print(json.dumps(row))


if __name__ == "__main__":
    main()
