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
   ``context_budget(0.4, longest prompt, max_new_tokens)``, the chosen placement);
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

    python benchmarks/bicc_premise.py --prompts 32 --group 8 --out docs/results/bicc_premise.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from word_problems import integer_reward, make_rows  # noqa: E402

from contrastive_rlvr.algorithms import BiCCTemplate, build_bicc_prompts, context_budget
from contrastive_rlvr.algorithms.bicc import (
    build_context,
    chat_conditioned_prompt,
    resolve_placement,
)
from contrastive_rlvr.evaluation.generate import DEFAULT_INSTRUCTION
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--context-ratio", type=float, default=0.4)
    parser.add_argument("--placement", default="auto", help="BiCC placement (auto: user_turn)")
    parser.add_argument("--seed", type=int, default=1, help="problem seed")
    parser.add_argument("--task", default="sums", help="benchmarks/word_problems.py task")
    parser.add_argument("--gen-batch", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    started = time.perf_counter()
    model, tok = load_model_and_tokenizer(args.model)
    rows = make_rows(args.prompts, args.seed, args.task)

    def render(msgs):
        return tok.apply_chat_template(
            msgs, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    def encode(text):
        return tok.encode(text, add_special_tokens=False)

    template = BiCCTemplate().encode(encode, max_items=args.group)
    eos = tok.eos_token_id
    placement = resolve_placement(args.placement, conversational=True)

    def strip(ids: list[int]) -> list[int]:
        return ids[:-1] if ids and ids[-1] in (eos, tok.pad_token_id) else ids

    per_prompt = {"opp_pos": [], "opp_neg": [], "same_pos": [], "same_neg": []}
    per_prompt_seq = {k: [] for k in per_prompt}
    contrast_tok, contrast_seq, accuracy, context_tokens = [], [], [], []
    all_messages = [
        [{"role": "user", "content": f"{row['question']}\n{DEFAULT_INSTRUCTION}"}] for row in rows
    ]
    samples = sample_groups(
        model, tok, [render(m) for m in all_messages], args.group, args.max_new_tokens,
        args.temperature, args.gen_batch,
    )  # fmt: skip
    print(
        f"sampled {len(rows)} x {args.group} in {time.perf_counter() - started:.0f} s", flush=True
    )
    for n, row in enumerate(rows):
        messages = all_messages[n]
        prompt = render(messages)
        gen = samples[n]
        completions = []
        for g in gen:
            cut = g.index(eos) + 1 if eos in g else len(g)  # keep the EOS as training does
            completions.append(g[:cut])
        texts = [tok.decode(c, skip_special_tokens=True) for c in completions]
        gold = row["answer"].split("####")[-1].strip()
        rewards = integer_reward([None] * args.group, texts, [gold] * args.group)
        accuracy.append(sum(rewards) / args.group)
        correct = [r > 0.5 for r in rewards]
        if all(correct) or not any(correct):
            print(f"prompt {n}: acc {accuracy[-1]:.2f} (one-sided, skipped)", flush=True)
            continue
        budget = context_budget(
            args.context_ratio,
            longest_prompt=len(prompt),
            max_completion_length=args.max_new_tokens,
        )
        common = dict(
            pad_token_id=tok.pad_token_id,
            budget=budget,
            placement=args.placement,
            strip_token_ids={eos, tok.pad_token_id},
            prompt_messages=[messages] * args.group,
            decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
            render=render,
        )
        rw = torch.tensor(rewards)
        opp = build_bicc_prompts(
            [prompt] * args.group, completions, rw, args.group, template, **common
        )
        plain = completion_logps(model, prompt, completions)
        lengths = torch.tensor([len(c) for c in completions], dtype=torch.float)
        d_tok, d_seq, s_tok, s_seq = {}, {}, {}, {}
        for side in (True, False):
            members = [i for i in range(args.group) if correct[i] == side]
            ctx = opp.input_ids[members[0]][opp.attention_mask[members[0]].bool()].tolist()
            context_tokens.append(int(opp.context_tokens[members[0]]))
            cond = completion_logps(model, ctx, [completions[i] for i in members])
            diff = cond.sum(1) - plain[members].sum(1)
            for j, i in enumerate(members):
                d_seq[i], d_tok[i] = float(diff[j]), float(diff[j] / lengths[i])
            # Control: the same framing (the header BiCC gives this row), with the
            # other members of the row's own side as the attempts.
            header = template.header_wrong if side else template.header_correct
            for i in members:
                others = [strip(completions[k]) for k in members if k != i]
                if not others:
                    continue
                ctx_ids = build_context(others, header, template, budget, "middle")
                if placement == "user_turn":
                    ctx_same = chat_conditioned_prompt(
                        messages, ctx_ids, decode=common["decode"], render=render
                    )
                elif placement == "after_prompt":
                    ctx_same = prompt + ctx_ids
                else:
                    ctx_same = ctx_ids + prompt
                lp = completion_logps(model, ctx_same, [completions[i]])
                s_seq[i] = float(lp.sum() - plain[i].sum())
                s_tok[i] = s_seq[i] / float(lengths[i])
        pos = [i for i in range(args.group) if correct[i]]
        neg = [i for i in range(args.group) if not correct[i]]

        def avg(d, idx):
            vals = [d[i] for i in idx if i in d]
            return sum(vals) / len(vals) if vals else None

        for key, d_t, d_s, idx in (
            ("opp_pos", d_tok, d_seq, pos),
            ("opp_neg", d_tok, d_seq, neg),
            ("same_pos", s_tok, s_seq, pos),
            ("same_neg", s_tok, s_seq, neg),
        ):
            if avg(d_t, idx) is not None:
                per_prompt[key].append(avg(d_t, idx))
                per_prompt_seq[key].append(avg(d_s, idx))
        contrast_tok.append(avg(d_tok, pos) - avg(d_tok, neg))
        contrast_seq.append(avg(d_seq, pos) - avg(d_seq, neg))
        print(
            f"prompt {n}: acc {accuracy[-1]:.2f} d(o+) {avg(d_tok, pos):+.3f} "
            f"d(o-) {avg(d_tok, neg):+.3f} per token",
            flush=True,
        )
    result = {
        "command": "python " + " ".join(sys.argv),
        "model": args.model,
        "prompts": args.prompts,
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "placement": args.placement,
        "context_ratio": args.context_ratio,
        "accuracy_mean": sum(accuracy) / len(accuracy),
        "two_sided_prompts": len(contrast_tok),
        "mean_context_tokens": sum(context_tokens) / max(len(context_tokens), 1),
        "per_token": {k: summarise(v) for k, v in per_prompt.items() if len(v) >= 2},
        "per_sequence": {k: summarise(v) for k, v in per_prompt_seq.items() if len(v) >= 2},
        "contrast_per_token": summarise(contrast_tok) if len(contrast_tok) >= 2 else None,
        "contrast_per_sequence": summarise(contrast_seq) if len(contrast_seq) >= 2 else None,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
