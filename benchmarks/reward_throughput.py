"""Answers verified per second by MathVerifyReward with 1 and 2 worker processes.

The answers are a mix, in batches of --batch (a GRPO step's completions):

- real model outputs, when --samples points at an eval ``samples/*.jsonl``
  file (each line has ``completion`` and ``gold``);
- completions built from the gold answers of the local benchmark files:
  the gold in ``\\boxed{}``, an equivalent form (``0.5`` for ``\\frac{1}{2}``),
  a wrong answer, the answer in ``<answer>`` tags, and no answer at all;
- a fraction --hostile of pathological answers (``9^{9^{9^9}}``,
  ``(10^{10})!``, a 100 kB sum) that each cost up to the timeout.

Usage: python benchmarks/reward_throughput.py [--n 1000] [--timeout 1] [--samples FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from contrastive_rlvr.evaluation import load_benchmark
from contrastive_rlvr.rewards import MathVerifyReward

HOSTILE = ["9^{9^{9^9}}", "(10^{10})!", "1+" * 50_000 + "1"]
REASONING = "Let me work through this step by step.\nFirst we set up the equation, then solve.\n"


def synthetic(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` (completion, gold) pairs in the five styles of the module docstring."""
    golds = list(load_benchmark("math500")["answer"]) + list(load_benchmark("gsm8k")["answer"])
    pairs = []
    for _ in range(n):
        gold = rng.choice(golds)
        style = rng.randrange(5)
        if style == 0:
            text = f"{REASONING}So the answer is $\\boxed{{{gold}}}$."
        elif style == 1:
            alt = f"{int(gold) * 1.0:.1f}" if gold.lstrip("-").isdigit() else gold.replace(" ", "")
            text = f"{REASONING}Therefore \\boxed{{{alt}}}."
        elif style == 2:
            text = f"{REASONING}Hence \\boxed{{{gold}+1}}."
        elif style == 3:
            text = f"{REASONING}<answer>{gold}</answer>"
        else:
            text = f"{REASONING}I could not finish the computation."
        pairs.append((text, gold))
    return pairs


def real(path: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["completion"], r["gold"]) for r in rows]


def measure(pairs: list[tuple[str, str]], workers: int, timeout: int, batch: int) -> float:
    """Answers per second over all ``pairs``, pool start-up excluded."""
    with MathVerifyReward(timeout=timeout, workers=workers, max_answer_chars=None) as reward:
        reward(None, ["\\boxed{1}"] * workers, answer=["1"] * workers)  # start and warm up
        start = time.perf_counter()
        for i in range(0, len(pairs), batch):
            chunk = pairs[i : i + batch]
            reward(None, [c for c, _ in chunk], answer=[g for _, g in chunk])
        elapsed = time.perf_counter() - start
        stats = reward.stats()
    print(
        f"  workers={workers}: {len(pairs)} answers in {elapsed:.2f} s = "
        f"{len(pairs) / elapsed:.1f} answers/s  (timeouts {stats['reward/timeouts']:.0f}, "
        f"killed {stats['reward/killed']:.0f}, correct {stats['reward/correct']:.0f})"
    )
    return len(pairs) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="synthetic answers")
    ap.add_argument("--hostile", type=float, default=0.01, help="fraction of hostile answers")
    ap.add_argument("--timeout", type=int, default=1, help="seconds per answer")
    ap.add_argument("--batch", type=int, default=64, help="answers per reward call")
    ap.add_argument("--samples", type=Path, default=None, help="eval samples jsonl to include")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    pairs = synthetic(rng, args.n)
    if args.samples is not None:
        pairs += real(args.samples)
    n_hostile = round(args.hostile * len(pairs))
    pairs += [(f"\\boxed{{{rng.choice(HOSTILE)}}}", "5") for _ in range(n_hostile)]
    rng.shuffle(pairs)
    print(
        f"{len(pairs)} answers ({n_hostile} hostile), timeout {args.timeout} s, "
        f"batches of {args.batch}"
    )
    one = measure(pairs, 1, args.timeout, args.batch)
    two = measure(pairs, 2, args.timeout, args.batch)
    print(f"ratio 2 workers / 1 worker: {two / one:.2f}x")


if __name__ == "__main__":
    main()
