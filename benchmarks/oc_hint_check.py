"""Can a model use OC-GRPO's hint? Accuracy with and without it on embedded-task problems.

Samples 8 completions for each of the first --limit train problems of the
embedded task, with the plain prompt and with OC-GRPO's default guided prompt
(``Hint: {hint}`` + newline + prompt, the hint a prefix of the reference
solution at fractions 0.25, 0.5, 0.75), and prints the accuracy, the number
of all-fail groups of the plain prompt, and how many of those the hinted
prompt rescues (at least one correct completion).

Usage: python benchmarks/oc_hint_check.py MODEL_DIR [--terms 4] [--max-new-tokens 16]
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM

from contrastive_rlvr.algorithms import guided_prompt, hint_prefix
from contrastive_rlvr.embedded import (
    TaskConfig,
    heldout_correctness,
    load_char_tokenizer,
    make_datasets,
)

GROUP = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--terms", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = load_char_tokenizer(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir)
    train, _ = make_datasets(TaskConfig(terms=args.terms))
    problems = train.select(range(args.limit))

    def correct(dataset, seed):
        return heldout_correctness(
            model, tokenizer, dataset, n=GROUP, seed=seed, max_new_tokens=args.max_new_tokens
        )

    plain = correct(problems, seed=1)
    failed = [i for i, row in enumerate(plain) if not any(row)]
    total = GROUP * args.limit
    print(f"plain: accuracy {sum(map(sum, plain)) / total:.4f}, all-fail groups {len(failed)}")
    for fraction in (0.25, 0.5, 0.75):
        hinted = problems.map(
            lambda r, f=fraction: {
                "prompt": guided_prompt(r["prompt"], hint_prefix(r["solution"], f))
            }
        )
        rows = correct(hinted, seed=2)
        rescued = sum(any(rows[i]) for i in failed)
        print(
            f"hint fraction {fraction}: accuracy {sum(map(sum, rows)) / total:.4f}, "
            f"rescued {rescued}/{len(failed)}"
        )


if __name__ == "__main__":
    main()
