"""Easy arithmetic problems, procedurally generated (seeded).

Task ``sums`` (``What is 7 + 5?``, operands 1..12) is the task of the real-model
run (docs/real-model.md) and of the BiCC premise benchmark: SmolLM2-135M-Instruct
solves about a third of them. Task ``word`` (one- and two-step word problems) is
harder for it (about 7% at temperature 0.6, measured with ``contrastive-rlvr eval``). Each row is
``{"id", "question", "answer"}`` with the answer written GSM8K-style
(``"#### 7"``), so one file serves both ``contrastive-rlvr train --dataset``
(the loader reduces the answer to ``7``) and ``contrastive-rlvr eval
--benchmarks sums=FILE --benchmark-fields prompt=question,answer=answer,format=gsm8k``.

    python benchmarks/word_problems.py --out runs/sums/sums.jsonl --n 144 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contrastive_rlvr.rewards.extract import completion_text, extract_answer

SUM_HIGH = 12  # 144 distinct sums
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


def make_sum(rng: random.Random, high: int = SUM_HIGH) -> tuple[str, int]:
    """``What is a + b?`` with ``a, b`` in 1..high: the task SmolLM2-135M partly solves
    (about a third right at temperature 0.7 with the step-by-step instruction)."""
    a, b = rng.randint(1, high), rng.randint(1, high)
    return f"What is {a} + {b}?", a + b


TASKS = {"sums": make_sum, "word": make_problem}


def make_rows(n: int, seed: int, task: str = "sums") -> list[dict[str, str]]:
    """``n`` distinct problems of ``task`` (:data:`TASKS`), deterministic in ``seed``."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    if task == "sums" and n > SUM_HIGH**2:
        raise ValueError(f"task 'sums' has only {SUM_HIGH**2} distinct problems, asked for {n}")
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        question, answer = TASKS[task](rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": f"wp-{len(rows)}", "question": question, "answer": f"#### {answer}"})
    return rows


def integer_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **kwargs: Any
) -> list[float]:
    """1.0 when the completion's answer is the gold integer, else 0.0.

    The answer is the last ``\\boxed{}`` (or ``<answer>`` tag), else the last number
    in the text: a 135M model rarely boxes, and these answers are plain integers,
    so no symbolic comparison is needed. Use as ``--rewards
    benchmarks/word_problems.py:integer_reward``.
    """
    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        got = extract_answer(completion_text(completion), last_number_fallback=True)
        try:
            scores.append(float(got is not None and int(float(got.replace(",", ""))) == int(gold)))
        except ValueError:
            scores.append(0.0)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", default="sums", choices=sorted(TASKS))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for row in make_rows(args.n, args.seed, args.task):
            f.write(json.dumps(row) + "\n")
    print(f"wrote {args.n} problems to {args.out}")


if __name__ == "__main__":
    main()
