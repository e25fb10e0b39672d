"""Easy one- and two-step arithmetic word problems, procedurally generated (seeded).

The task of the real-model run (docs/real-model.md) and of the BiCC premise
benchmark: SmolLM2-135M-Instruct solves part of them. Each row is
``{"id", "question", "answer"}`` with the answer written GSM8K-style
(``"#### 7"``), so one file serves both ``contrastive-rlvr train --dataset``
(the loader reduces the answer to ``7``) and ``contrastive-rlvr eval
--benchmarks gsm8k --benchmarks-dir DIR`` (when saved as ``DIR/gsm8k_test.jsonl``).

    python benchmarks/word_problems.py --out runs/word/gsm8k_test.jsonl --n 600 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ("Tom", "Anna", "Ben", "Mia", "Sam", "Lily", "Max", "Emma", "Leo", "Zoe")
THINGS = ("apples", "pencils", "marbles", "stickers", "books", "cookies", "coins", "cards")


def make_problem(rng: random.Random) -> tuple[str, int]:
    """One problem and its integer answer."""
    name, other = rng.sample(NAMES, 2)
    thing = rng.choice(THINGS)
    kind = rng.choice(("add", "sub", "add2", "mul"))
    if kind == "add":
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        return (
            f"{name} has {a} {thing}. {other} gives {name} {b} more. "
            f"How many {thing} does {name} have now?",
            a + b,
        )
    if kind == "sub":
        a = rng.randint(10, 40)
        b = rng.randint(1, a - 1)
        return (
            f"{name} has {a} {thing} and gives {b} of them to {other}. "
            f"How many {thing} does {name} have left?",
            a - b,
        )
    if kind == "add2":
        a, b, c = (rng.randint(1, 15) for _ in range(3))
        return (
            f"{name} has {a} {thing}, buys {b} more, and then finds {c} more. "
            f"How many {thing} does {name} have?",
            a + b + c,
        )
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (
        f"{name} has {a} bags with {b} {thing} in each bag. How many {thing} does {name} have?",
        a * b,
    )


def make_rows(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` distinct problems, deterministic in ``seed``."""
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        question, answer = make_problem(rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": f"wp-{len(rows)}", "question": question, "answer": f"#### {answer}"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for row in make_rows(args.n, args.seed):
            f.write(json.dumps(row) + "\n")
    print(f"wrote {args.n} problems to {args.out}")


if __name__ == "__main__":
    main()
