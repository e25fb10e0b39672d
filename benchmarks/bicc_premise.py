"""Does a pretrained chat model read BiCC's context as the method assumes? (no training)

BiCC scores a correct completion o+ of a group as the continuation of
``[q ; O-]`` (the group's wrong attempts in the context) and a wrong one o- as
the continuation of ``[q ; O+]``. Its premise is a model that uses that
context: seeing wrong attempts should make a correct answer more likely, and
seeing correct attempts should make a wrong one less likely. This script
measures it on SmolLM2-135M-Instruct and the sums task of the real-model
run (benchmarks/word_problems.py), without training:

1. sample G completions for each of N prompts (chat template, the training
   instruction), score them with the run's reward, keep two-sided groups;
2. build the conditioned prompts exactly as training does
   (``build_bicc_prompts``: the default framing, the context budget
   ``context_budget(0.4, longest prompt, max_new_tokens)``), for each placement
   asked (default: ``user_turn``, the chat default, and ``after_prompt``, the
   old one: the attempts inside the assistant turn), on the same samples;
3. per completion, ``d = log pi(o | [q ; O_opp]) - log pi(o | q)``, per token
   (mean over the completion's tokens) and per sequence (sum); as a control,
   ``d_same`` with the completion's own side in the context instead (the other
   members of its partition; rows alone on their side have none), which
   separates "any attempts in the context" from "the opposite attempts";
4. average within each prompt (over its correct rows, and over its wrong rows),
   then over prompts: mean with a 95% Student t interval (prompts are the
   independent units). ``contrast = d(o+) - d(o-)`` per prompt is the quantity
   that matters for the policy gradient: positive means the context moves
   probability toward the correct completions relative to the wrong ones.

Example (about 10 minutes on 2 CPU cores):

    python benchmarks/bicc_premise.py --prompts 24 --group 8 --out docs/results/bicc_premise.json
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

from contrastive_rlvr.algorithms import BiCCTemplate, context_budget
from contrastive_rlvr.algorithms.bicc import (
    FRAMING_BUDGETS,
    build_context,
    chat_conditioned_prompt,
    context_plan,
    resolve_placement,
)
from contrastive_rlvr.generation import DEFAULT_INSTRUCTION
from contrastive_rlvr.models import load_model_and_tokenizer
from contrastive_rlvr.stats import mean_ci


def completion_logps(model, prompt: list[int], completions: list[list[int]]) -> torch.Tensor:
    """(n, T) log-probs of each completion's tokens after ``prompt`` (0 on padding)."""
    width = max(len(c) for c in completions)
    ids = torch.zeros(len(completions), len(prompt) + width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, c in enumerate(completions):
        row = prompt + c
        ids[i, : len(row)] = torch.tensor(row)  # right padding: positions stay 0..L-1
        att[i, : len(row)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits[:, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), -1)
    target = ids[:, len(prompt) :]
    out = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return out * att[:, len(prompt) :]


def sample_groups(
    model, tok, prompts: list[list[int]], group: int, max_new_tokens: int, temperature: float,
    batch: int,
) -> list[list[list[int]]]:  # fmt: skip
    """``group`` sampled completions (token ids, padding after EOS included) per prompt,
    ``batch`` prompts per ``generate`` call (left padding)."""
    out = []
    for start in range(0, len(prompts), batch):
        chunk = [p for p in prompts[start : start + batch] for _ in range(group)]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(chunk):
            ids[i, width - len(p) :] = torch.tensor(p)
            att[i, width - len(p) :] = 1
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=att,
                do_sample=True,
                temperature=temperature,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
            )[:, width:].tolist()
        out += [gen[k : k + group] for k in range(0, len(gen), group)]
    return out


def summarise(values: list[float]) -> dict:
    ci = mean_ci(values)
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in ci.to_dict().items()}


def conditioned_prompt(
    placement: str, messages, prompt: list[int], context: list[int], decode, render
) -> list[int]:
    """The prompt with ``context`` (framed attempts as ids) placed as training places it."""
    if not context:
        return prompt
    if placement == "user_turn":
        return chat_conditioned_prompt(messages, context, decode=decode, render=render)
    return prompt + context if placement == "after_prompt" else context + prompt


def measure_group(
    model, prompt, messages, completions, correct, template, budget, placement, decode, render,
    framing="outside",
) -> dict[str, dict[int, float]]:  # fmt: skip
    """Per row: ``d`` (opposite side in the context, as BiCC) and ``same`` (the same
    framing with the other members of the row's own side), per token and per sequence;
    per conditioned row, how many opposite attempts its context holds whole and cut
    (an attempt left out counts as cut, as the training metrics count it)."""
    plain = completion_logps(model, prompt, completions).sum(1)
    out = {"opp_tok": {}, "opp_seq": {}, "same_tok": {}, "same_seq": {}, "ctx": {},
           "whole": {}, "cut": {}}  # fmt: skip
    for side in (True, False):
        members = [i for i in range(len(completions)) if correct[i] == side]
        opposite = [i for i in range(len(completions)) if correct[i] != side]
        # BiCC shows correct rows the wrong attempts under header_wrong, and vice versa.
        header = template.header_wrong if side else template.header_correct
        attempts = [strip_eos(completions[k]) for k in opposite]
        ctx = build_context(attempts, header, template, budget, "middle", framing=framing)
        kept = context_plan([len(a) for a in attempts], header, template, budget,
                            framing=framing)  # fmt: skip
        whole = sum(1 for a, k in zip(attempts, kept, strict=False) if k >= len(a))
        cond = conditioned_prompt(placement, messages, prompt, ctx, decode, render)
        lp = completion_logps(model, cond, [completions[i] for i in members]).sum(1)
        for j, i in enumerate(members):
            out["opp_seq"][i] = float(lp[j] - plain[i])
            out["opp_tok"][i] = out["opp_seq"][i] / len(completions[i])
            out["ctx"][i] = len(cond) - len(prompt)
            out["whole"][i] = whole
            out["cut"][i] = len(attempts) - whole
        for i in members:
            others = [strip_eos(completions[k]) for k in members if k != i]
            if not others:
                continue
            ctx = build_context(others, header, template, budget, "middle", framing=framing)
            cond = conditioned_prompt(placement, messages, prompt, ctx, decode, render)
            lp_i = completion_logps(model, cond, [completions[i]]).sum(1)
            out["same_seq"][i] = float(lp_i[0] - plain[i])
            out["same_tok"][i] = out["same_seq"][i] / len(completions[i])
    return out


EOS_IDS: set[int] = set()


def strip_eos(ids: list[int]) -> list[int]:
    """A completion as it goes into the context: trailing EOS / pad removed."""
    ids = list(ids)
    while ids and ids[-1] in EOS_IDS:
        ids.pop()
    return ids


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
    parser.add_argument("--seed", type=int, default=1, help="problem seed")
    parser.add_argument("--task", default="sums", help="benchmarks/word_problems.py task")
    parser.add_argument("--gen-batch", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    placements = [resolve_placement(p, conversational=True) for p in args.placements.split(",")]
    torch.manual_seed(0)
    started = time.perf_counter()
    model, tok = load_model_and_tokenizer(args.model)
    EOS_IDS.update({tok.eos_token_id, tok.pad_token_id})
    rows = make_rows(args.prompts, args.seed, args.task)

    def render(msgs):
        return tok.apply_chat_template(
            msgs, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=True)

    template = BiCCTemplate().encode(
        lambda text: tok.encode(text, add_special_tokens=False), max_items=args.group
    )
    all_messages = [
        [{"role": "user", "content": f"{row['question']}\n{DEFAULT_INSTRUCTION}"}] for row in rows
    ]
    prompts = [render(m) for m in all_messages]
    samples = sample_groups(
        model, tok, prompts, args.group, args.max_new_tokens, args.temperature, args.gen_batch
    )
    took = time.perf_counter() - started
    print(f"sampled {len(rows)} x {args.group} in {took:.0f} s", flush=True)
    keys = ("opp_pos", "opp_neg", "same_pos", "same_neg", "contrast")
    tables = {p: {u: {k: [] for k in keys} for u in ("tok", "seq")} for p in placements}
    context_tokens = {p: [] for p in placements}
    whole_cut = {p: ([], []) for p in placements}
    accuracy = []
    for n, row in enumerate(rows):
        eos = tok.eos_token_id
        completions = [g[: g.index(eos) + 1] if eos in g else g for g in samples[n]]
        texts = [decode(c) for c in completions]
        gold = row["answer"].split("####")[-1].strip()
        rewards = integer_reward([None] * args.group, texts, [gold] * args.group)
        accuracy.append(sum(rewards) / args.group)
        correct = [r > 0.5 for r in rewards]
        if all(correct) or not any(correct):
            print(f"prompt {n}: acc {accuracy[-1]:.2f} (one-sided, skipped)", flush=True)
            continue
        budget = context_budget(
            args.context_ratio,
            longest_prompt=len(prompts[n]),
            max_completion_length=args.max_new_tokens,
            max_seq_len=args.max_seq_len,
        )
        pos = [i for i in range(args.group) if correct[i]]
        neg = [i for i in range(args.group) if not correct[i]]
        line = f"prompt {n}: acc {accuracy[-1]:.2f}"
        for placement in placements:
            m = measure_group(
                model, prompts[n], all_messages[n], completions, correct, template, budget,
                placement, decode, render, args.framing,
            )  # fmt: skip
            context_tokens[placement] += list(m["ctx"].values())
            whole_cut[placement][0].extend(m["whole"].values())
            whole_cut[placement][1].extend(m["cut"].values())
            for unit in ("tok", "seq"):
                t = tables[placement][unit]
                for key, d, idx in (
                    ("opp_pos", m[f"opp_{unit}"], pos),
                    ("opp_neg", m[f"opp_{unit}"], neg),
                    ("same_pos", m[f"same_{unit}"], pos),
                    ("same_neg", m[f"same_{unit}"], neg),
                ):
                    vals = [d[i] for i in idx if i in d]
                    if vals:
                        t[key].append(sum(vals) / len(vals))
                t["contrast"].append(t["opp_pos"][-1] - t["opp_neg"][-1])
            tt = tables[placement]["tok"]
            line += f" | {placement}: d(o+) {tt['opp_pos'][-1]:+.3f} d(o-) {tt['opp_neg'][-1]:+.3f}"
        print(line, flush=True)
    result = {
        "command": "python " + " ".join(sys.argv),
        "model": args.model,
        "task": args.task,
        "prompts": args.prompts,
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "context_ratio": args.context_ratio,
        "max_seq_len": args.max_seq_len,
        "framing": args.framing,
        "accuracy_mean": sum(accuracy) / len(accuracy),
        "two_sided_prompts": len(tables[placements[0]]["tok"]["contrast"]),
        "placements": {
            p: {
                "mean_context_tokens": sum(context_tokens[p]) / max(len(context_tokens[p]), 1),
                # per conditioned row: opposite attempts held whole / cut or left out
                "whole_attempts": sum(whole_cut[p][0]) / max(len(whole_cut[p][0]), 1),
                "cut_attempts": sum(whole_cut[p][1]) / max(len(whole_cut[p][1]), 1),
                **{
                    f"per_{'token' if u == 'tok' else 'sequence'}": {
                        k: summarise(v) for k, v in tables[p][u].items() if len(v) >= 2
                    }
                    for u in ("tok", "seq")
                },
            }
            for p in placements
        },
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
