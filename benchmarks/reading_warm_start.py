"""Does an embedded warm start read BiCC's context the way BiCC assumes? Measured before RL.

Builds (or loads) a warm-started embedded model, then does what BiCC's trainer
does on the held-out problems: samples G completions per problem from the
plain prompt (temperature 1, the embedded default's 16 tokens), scores them
with the task reward, and for every group with both outcomes builds the
conditioned prompts with :func:`~contrastive_rlvr.algorithms.build_bicc_prompts`
exactly as the trainer's ``ConditionedPrompts`` stage calls it (default
template, budget ``floor(0.4 x 256) = 102`` tokens, ``middle`` truncation,
EOS and padding stripped from the quoted attempts). BiCC's premise is

    d+ = log pi(o+ | [q; O-]) - log pi(o+ | q) > 0   for correct o+ after the wrong ones,
    d- = log pi(o- | [q; O+]) - log pi(o- | q) < 0   for wrong o- after the correct ones,

sequence log-probs in nats (the completion's tokens and its EOS). Each problem
gives the mean d+ over its correct rows and the mean d- over its wrong rows;
printed are the means over problems with a 95% normal interval
(1.96 x standard error over problems), and the held-out accuracy of the samples;
the JSON also has the medians and the share of problems on the premise's side.

Usage (one JSON line of results at the end)::

    python benchmarks/reading_warm_start.py --context_frac 0.5 --steps 800 \\
        --context_target reference --save /tmp/ws
    python benchmarks/reading_warm_start.py --load /tmp/ws      # measure a saved one
    python benchmarks/reading_warm_start.py --load runs/x/sft-cache/seed0/sft-model
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from contrastive_rlvr.algorithms import build_bicc_prompts
from contrastive_rlvr.embedded import (
    EmbeddedSettings,
    ModelShape,
    WarmStartConfig,
    arithmetic_reward,
    build_embedded_default,
    load_char_tokenizer,
    make_datasets,
)
from contrastive_rlvr.embedded.evaluate import sample_completions
from contrastive_rlvr.embedded.sft import encode_template


def sequence_logps(model, rows: list[list[int]], prompt_lens: list[int]) -> list[float]:
    """Sum of log-probs of each row's tokens after its first ``prompt_lens[i]`` tokens."""
    out = []
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        logp = model(input_ids=ids).logits[:, :-1].log_softmax(-1)
    token = logp.gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
    for i, (r, p) in enumerate(zip(rows, prompt_lens, strict=True)):
        out.append(float(token[i, p - 1 : len(r) - 1].sum()))
    return out


def mean_ci(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
    return mean, 1.96 * math.sqrt(var / n)


def measure(
    model,
    tokenizer,
    heldout,
    *,
    group: int,
    problems: int,
    budget: int,
    seed: int,
    placement: str = "after_prompt",
) -> dict:
    model.eval()
    prompts = list(heldout["prompt"][:problems])
    answers = list(heldout["answer"][:problems])
    samples = sample_completions(model, tokenizer, prompts, n=group, max_new_tokens=16, seed=seed)
    template = encode_template(tokenizer, group)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    d_pos, d_neg, accuracy, mixed = [], [], [], 0
    for prompt, answer, texts in zip(prompts, answers, samples, strict=True):
        rewards = arithmetic_reward([prompt] * group, texts, [answer] * group)
        accuracy.append(sum(rewards) / group)
        if 0 < sum(rewards) < group:
            mixed += 1
        else:
            continue
        q = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        comps = [tokenizer(t, add_special_tokens=False)["input_ids"] + [eos] for t in texts]
        built = build_bicc_prompts(
            [q] * group,
            comps,
            torch.tensor(rewards),
            group,
            template,
            budget=budget,
            pad_token_id=pad,
            placement=placement,
            strip_token_ids={eos, pad},
            framing="inside",
        )
        cond = [built.input_ids[i][built.attention_mask[i].bool()].tolist() for i in range(group)]
        plain = sequence_logps(model, [q + c for c in comps], [len(q)] * group)
        conditioned = sequence_logps(
            model, [p + c for p, c in zip(cond, comps, strict=True)], [len(p) for p in cond]
        )
        diffs = [c - p for c, p in zip(conditioned, plain, strict=True)]
        pos = [d for d, r in zip(diffs, rewards, strict=True) if r > 0.5]
        neg = [d for d, r in zip(diffs, rewards, strict=True) if r <= 0.5]
        d_pos.append(sum(pos) / len(pos))
        d_neg.append(sum(neg) / len(neg))
    mp, cp = mean_ci(d_pos)
    mn, cn = mean_ci(d_neg)
    return {
        "problems": problems,
        "mixed_groups": mixed,
        "heldout_accuracy": sum(accuracy) / len(accuracy),
        "d_pos_mean": mp,
        "d_pos_ci95": cp,
        "d_neg_mean": mn,
        "d_neg_ci95": cn,
        "d_pos_median": sorted(d_pos)[len(d_pos) // 2],
        "d_neg_median": sorted(d_neg)[len(d_neg) // 2],
        "d_pos_share_above_0": sum(d > 0 for d in d_pos) / len(d_pos),
        "d_neg_share_below_0": sum(d < 0 for d in d_neg) / len(d_neg),
        "premise_holds": mp - cp > 0 and mn + cn < 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", help="a saved warm start (an sft-model folder) to measure")
    ap.add_argument("--save", help="where to save the warm start built here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--context_frac", type=float, default=0.5)
    ap.add_argument("--context_target", default="avoid")
    ap.add_argument("--context_attempts", default="demonstrator")
    ap.add_argument("--context_start_frac", type=float, default=0.25)
    ap.add_argument("--context_budget", type=int, default=102, help="0: attempts in full")
    ap.add_argument("--placement", default="after_prompt", help="BiCC's, in SFT and measuring")
    ap.add_argument("--phrases", action="store_true", help="BiCC's framing as one token a piece")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--budget", type=int, default=102, help="BiCC's budget when measuring")
    args = ap.parse_args()
    torch.set_num_threads(1)
    started = time.time()
    if args.load:
        tokenizer = load_char_tokenizer(args.load)
        model = AutoModelForCausalLM.from_pretrained(args.load)
        _, heldout = make_datasets()
        built = {"load": args.load}
    else:
        sft = WarmStartConfig(
            steps=args.steps,
            warmup_steps=min(40, args.steps - 1),
            lr=args.lr,
            context_frac=args.context_frac,
            context_target=args.context_target,
            context_attempts=args.context_attempts,
            context_placement=args.placement,
            context_start_frac=args.context_start_frac,
            context_budget=args.context_budget or None,
            context_max_attempts=args.group - 1,
        )
        settings = EmbeddedSettings(
            seed=args.seed, model=ModelShape(layers=args.layers), sft=sft, bicc_phrases=args.phrases
        )
        model, tokenizer, _, heldout = build_embedded_default(args.save, settings=settings)
        built = {k: v for k, v in vars(args).items() if k not in ("load", "save")}
    sft_s = time.time() - started
    result = measure(
        model,
        tokenizer,
        heldout,
        group=args.group,
        problems=args.problems,
        budget=args.budget,
        seed=args.seed,
        placement=args.placement,
    )
    result.update(built, sft_seconds=round(sft_s))
    print(
        f"acc {result['heldout_accuracy']:.3f}  mixed {result['mixed_groups']}/{args.problems}  "
        f"d+ {result['d_pos_mean']:+.3f} +- {result['d_pos_ci95']:.3f}  "
        f"d- {result['d_neg_mean']:+.3f} +- {result['d_neg_ci95']:.3f}  ({sft_s:.0f} s build)"
    )
    print(json.dumps(result))
    if args.save:
        Path(args.save, "premise.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
