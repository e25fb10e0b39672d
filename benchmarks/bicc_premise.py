"""Does a pretrained chat model read BiCC's context as the method assumes? (no training)

The measurement is :mod:`contrastive_rlvr.premise`, the code behind
``contrastive-rlvr premise`` (docs/bicc.md, "Will BiCC help on my model?"); this
script keeps the setting of the earlier measurements (SmolLM2-135M-Instruct, the
sums task of benchmarks/word_problems.py, the chat template with the training
instruction) and adds what the command does not: several BiCC placements
measured on the same sampled groups (default ``user_turn``, the chat default, and
``after_prompt``, the attempts inside the assistant turn). Per placement it
prints the command's table and verdict.

The same-sign control is this script's default (the earlier measurements'
``same`` columns); ``--control other_problem`` is the command's default.

Example (minutes on 2 CPU cores):

    python benchmarks/bicc_premise.py --prompts 24 --group 8 --out /tmp/premise.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from word_problems import integer_reward, make_rows

from contrastive_rlvr.algorithms import BiCCTemplate
from contrastive_rlvr.algorithms.bicc import FRAMING_BUDGETS, resolve_placement
from contrastive_rlvr.algorithms.bicc_rows import BiCCRowBuilder, end_token_ids, template_encoder
from contrastive_rlvr.generation import DEFAULT_INSTRUCTION
from contrastive_rlvr.models import load_model_and_tokenizer
from contrastive_rlvr.premise import (
    CONTROLS,
    Conditioning,
    Group,
    format_table,
    measure,
    sample_groups,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--context-ratio", type=float, default=0.4)
    parser.add_argument(
        "--placements",
        default="user_turn,after_prompt",
        help="comma-separated BiCC placements to measure on the same samples",
    )
    parser.add_argument(
        "--max-seq-len", type=int, default=None,
        help="the length the budget is a share of (training's bicc_max_seq_len; default: "
        "prompt + max-new-tokens)",
    )  # fmt: skip
    parser.add_argument(
        "--framing", choices=FRAMING_BUDGETS, default="outside",
        help="training's bicc_framing_budget (default outside, training's default)",
    )  # fmt: skip
    parser.add_argument("--control", choices=CONTROLS, default="same_sign")
    parser.add_argument("--seed", type=int, default=1, help="problem seed")
    parser.add_argument("--task", default="sums", help="benchmarks/word_problems.py task")
    parser.add_argument("--gen-batch", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    placements = [resolve_placement(p, conversational=True) for p in args.placements.split(",")]
    started = time.perf_counter()
    model, tok = load_model_and_tokenizer(args.model)
    model.eval()
    rows = make_rows(args.prompts, args.seed, args.task)

    def render(msgs: list[dict]) -> list[int]:
        ids = tok.apply_chat_template(
            msgs, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    messages = [
        [{"role": "user", "content": f"{row['question']}\n{DEFAULT_INSTRUCTION}"}] for row in rows
    ]
    prompts = [render(m) for m in messages]
    ends = end_token_ids(tok.eos_token_id, model.generation_config.eos_token_id)
    pad = tok.pad_token_id
    samples = sample_groups(
        model, prompts, group=args.group, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_p=1.0, pad_token_id=pad, end_ids=ends,
        batch=args.gen_batch, seed=0,
    )  # fmt: skip
    print(f"sampled {len(rows)} x {args.group} in {time.perf_counter() - started:.0f} s")
    groups = []
    for n, row in enumerate(rows):
        texts = [tok.decode(c, skip_special_tokens=True) for c in samples[n]]
        gold = row["answer"].split("####")[-1].strip()
        rewards = integer_reward([None] * args.group, texts, [gold] * args.group)
        groups.append(Group(prompts[n], samples[n], [r > 0.5 for r in rewards], messages[n]))
    template = BiCCTemplate().encode(template_encoder(tok), max_items=args.group)
    result = {"command": "python " + " ".join(sys.argv), **{k: v for k, v in vars(args).items()
              if k != "out"}, "placements": {}}  # fmt: skip
    for placement in placements:
        builder = BiCCRowBuilder(
            template=template, context_ratio=args.context_ratio, max_seq_len=args.max_seq_len,
            max_completion_length=args.max_new_tokens, truncation="middle",
            placement=placement, threshold=0.5, strip_token_ids=frozenset({*ends, pad}),
            framing=args.framing,
        )  # fmt: skip
        cond = Conditioning(
            builder, pad_token_id=pad, render=render,
            decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
        )  # fmt: skip
        measured = measure(
            model, groups, cond, control=args.control,
            budget=lambda g, b=builder: b.budget(len(g.prompt_ids)),
        )  # fmt: skip
        print(format_table(measured, title=f"\nplacement {placement}"), flush=True)
        result["placements"][placement] = measured.to_dict()
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
