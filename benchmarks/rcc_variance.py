"""Gradient variance of the plain group baseline, RCC and the exact optimal baseline.

Two studies (``docs/rcc.md`` has the results and the reading):

``bandit``: exact, by summing over every group of a softmax bandit
(:mod:`contrastive_rlvr.algorithms.gradient_variance`): K answers, the first
``--correct`` of them right (reward 1), reference logits 0, the sampling policy
``pi_old`` with logits raised by ``s`` on the right answers, G draws per group.
Regimes:

- ``on_policy``: samples from ``pi_theta = pi_old``, weight 1;
- ``drifted``: samples from ``pi_old``, ``pi_theta`` = ``pi_old`` with the right
  answers raised by ``--drift`` more (several updates per batch), weight
  ``pi_theta / pi_old``;
- ``from_ref``: samples from the reference, ``pi_theta = pi_old``, weight
  ``pi_theta / pi_ref`` (the setting RCC's derivation assumes).

Baselines: ``plain`` (group mean), ``rcc_frozen`` (delta = log pi_old - log
pi_ref, as the trainer's ``rcc_reference=reference``; in ``from_ref``
log pi_theta - log pi_ref), ``rcc_sampling`` (delta = log pi_theta - log q, the
trainer's ``rcc_reference=sampling``), each with ``bound`` none and
reward_range, and ``optimal`` (the constant ``E[w^2 R |g|^2] / E[w^2 |g|^2]``).

``model``: very-large-sample, on the embedded model's real completions: per
prompt, many groups of G completions; per-completion gradients of
``mean_t log pi`` (GRPO's per-row score) with GRPO's token ratios in the
off-policy regimes; the trace of the covariance of the group estimator across
groups, averaged over prompts.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_variance.py bandit [--json out.json]
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/rcc_variance.py model \\
        [--prompts 12 --groups 48 --json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from contrastive_rlvr.algorithms import group_advantages, rcc_advantages
from contrastive_rlvr.algorithms.gradient_variance import (
    composition_log_probs,
    composition_rows,
    compositions,
    estimator_moments,
    group_coefficients,
    softmax_scores,
    variance_optimal_baseline,
)

REGIMES = ("on_policy", "drifted", "from_ref")
BOUNDS = ("none", "reward_range")


# ----------------------------------------------------------------------------- bandit


def bandit_policies(
    num_answers: int, num_correct: int, shift: float, drift: float, regime: str
) -> dict[str, torch.Tensor]:
    """Logits and probabilities of one bandit regime (module docstring)."""
    rewards = torch.zeros(num_answers, dtype=torch.float64)
    rewards[:num_correct] = 1.0
    ref_logits = torch.zeros(num_answers, dtype=torch.float64)
    old_logits = ref_logits + shift * rewards
    theta = old_logits + (drift * rewards if regime == "drifted" else 0.0)
    log_pi = torch.log_softmax(theta, 0)
    log_old = torch.log_softmax(old_logits, 0)
    log_ref = torch.log_softmax(ref_logits, 0)
    log_q = log_ref if regime == "from_ref" else log_old
    # Frozen-reference delta: the trainer takes it at sampling time (pi_old); when
    # sampling from the reference, pi_old would be pi_ref and delta 0, so the
    # derivation's delta log pi_theta - log pi_ref is used there.
    delta_frozen = (log_pi if regime == "from_ref" else log_old) - log_ref
    return {
        "theta": theta,
        "rewards": rewards,
        "q": log_q.exp(),
        "weights": (log_pi - log_q).exp(),
        "delta_frozen": delta_frozen,
        "delta_sampling": log_pi - log_q,
    }


def _moments(
    adv: torch.Tensor, rows: torch.Tensor, log_p: torch.Tensor, h: torch.Tensor, true_grad
) -> dict:
    """Exact moments of g_hat for one advantage rule (advantages of every composition)."""
    mean, var = estimator_moments(group_coefficients(rows, adv, h.shape[0]), log_p, h)
    # Group-mean baselines shrink E[g_hat] by (G - 1) / G and RCC by other
    # factors: tr Cov / |E g_hat|^2 compares the noise at equal signal.
    return {
        "var": float(var),
        "nsr": float(var / mean.pow(2).sum()),
        "mean_over_true": float(mean.norm() / true_grad.norm()),
        "cos": float(mean @ true_grad / (mean.norm() * true_grad.norm())),
    }


def bandit_study(
    *,
    num_answers: int = 12,
    num_correct: int = 4,
    group_size: int = 8,
    shifts: tuple[float, ...] = (0.5, 1.0, 2.0),
    drift: float = 0.2,
    coef: float = 2.0,
) -> list[dict]:
    """Exact ``tr Cov(g_hat)`` of every baseline in every regime and shift."""
    counts = compositions(num_answers, group_size)
    rows = composition_rows(counts)  # (N, G)
    out = []
    for regime in REGIMES:
        for shift in shifts:
            pol = bandit_policies(num_answers, num_correct, shift, drift, regime)
            log_p = composition_log_probs(counts, pol["q"])
            scores = softmax_scores(pol["theta"])  # (K, K)
            h = pol["weights"].unsqueeze(1) * scores  # (K, P)
            pi = torch.softmax(pol["theta"], 0)
            true_grad = (pi * pol["rewards"]) @ scores
            rewards = pol["rewards"][rows].reshape(-1)  # (N * G,)

            def moments(adv: torch.Tensor, ctx=(rows, log_p, h, true_grad)) -> dict:
                return _moments(adv, *ctx)

            for scale_by_std in (False, True):
                row = {
                    "regime": regime,
                    "shift": shift,
                    "drift": drift if regime == "drifted" else 0.0,
                    "scale_by_std": scale_by_std,
                    "p_correct_q": float(pol["q"][:num_correct].sum()),
                    "true_grad_norm": float(true_grad.norm()),
                    "plain": moments(
                        group_advantages(rewards, group_size, scale_by_std=scale_by_std)
                    ),
                }
                for ref in ("frozen", "sampling"):
                    delta = pol[f"delta_{ref}"][rows].reshape(-1)
                    for bound in BOUNDS:
                        adv = rcc_advantages(
                            rewards,
                            delta,
                            group_size,
                            coef=coef,
                            bound=bound,
                            scale_by_std=scale_by_std,
                        )
                        row[f"rcc_{ref}_{bound}"] = moments(adv)
                if not scale_by_std:
                    b_opt = variance_optimal_baseline(
                        pol["q"], pol["rewards"], pol["weights"], scores.pow(2).sum(1)
                    )
                    row["optimal_b"] = float(b_opt)
                    row["optimal"] = moments(rewards - b_opt)
                out.append(row)
    return out


BANDIT_COLUMNS = (
    "rcc_frozen_none",
    "rcc_frozen_reward_range",
    "rcc_sampling_none",
    "rcc_sampling_reward_range",
    "optimal",
)


def print_bandit(results: list[dict]) -> None:
    """Two tables per advantage scaling: tr Cov ratio and noise-to-signal ratio to plain."""
    for scale in (False, True):
        for what, key in (("tr Cov", "var"), ("tr Cov / |E g_hat|^2", "nsr")):
            print(f"\n## {'(R - b) / std' if scale else 'R - b'}: {what}, ratio to plain")
            print(
                "regime     shift  p(right)  plain  " + " ".join(f"{c:>25}" for c in BANDIT_COLUMNS)
            )
            for r in results:
                if r["scale_by_std"] != scale:
                    continue
                cells = [
                    f"{r[c][key] / r['plain'][key]:25.3f}" if c in r else " " * 25
                    for c in BANDIT_COLUMNS
                ]
                print(
                    f"{r['regime']:10} {r['shift']:5.1f}  {r['p_correct_q']:8.3f}  "
                    f"{r['plain'][key]:5.3f}  " + " ".join(cells)
                )


# ----------------------------------------------------------------------------- model

MODEL_RULES = (
    "plain",
    "rcc_frozen_none",
    "rcc_frozen_reward_range",
    "rcc_sampling_none",
    "rcc_sampling_reward_range",
)


def load_policy(model_dir: str | None, seed: int):
    """The warm-started embedded model (saved by ``build_embedded_default`` or built now)."""
    from transformers import AutoModelForCausalLM

    from contrastive_rlvr.embedded import build_embedded_default, load_char_tokenizer, make_datasets

    if model_dir is None:
        model, tokenizer, train, _ = build_embedded_default(seed=seed)
        return model, tokenizer, train
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return model, load_char_tokenizer(model_dir), make_datasets()[0]


@torch.no_grad()
def sample_ids(model, tokenizer, prompt: str, n: int, max_new: int) -> list[list[int]]:
    """``n`` completions of one prompt as token ids, through ``<eos>`` when produced."""
    enc = tokenizer([prompt] * n, return_tensors="pt")
    model.eval()
    out = model.generate(
        **enc,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    rows = []
    for ids in out[:, enc["input_ids"].shape[1] :].tolist():
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
        rows.append(ids)
    return rows


def token_logps(model, prompt_ids: list[int], completions: list[list[int]]):
    """Per-token log-probs (N, T) of the completions after one prompt, and their mask."""
    width = max(len(c) for c in completions)
    pad = 0
    ids = torch.tensor([prompt_ids + c + [pad] * (width - len(c)) for c in completions])
    mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions])
    attn = torch.cat([torch.ones(len(completions), len(prompt_ids), dtype=torch.long), mask], 1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, len(prompt_ids) - 1 : -1]
    logp = torch.log_softmax(logits.float(), -1).gather(2, ids[:, len(prompt_ids) :, None])[..., 0]
    return logp * mask, mask.float()


def rewards_of(tokenizer, prompt: str, answer: str, completions: list[list[int]]) -> torch.Tensor:
    from contrastive_rlvr.embedded import arithmetic_reward

    texts = [tokenizer.decode(c, skip_special_tokens=True) for c in completions]
    return torch.tensor(arithmetic_reward([prompt] * len(texts), texts, [answer] * len(texts)))


def rl_steps(
    model,
    tokenizer,
    train,
    *,
    steps: int,
    prompts: int,
    group_size: int,
    lr: float,
    max_new: int,
    seed: int,
    clip: float | None = None,
    fixed=None,
) -> dict:
    """A few on-policy Dr.GRPO updates (or ``fixed`` batches with PPO clipping)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = torch.Generator().manual_seed(seed)
    accs = []
    for _ in range(steps):
        batch = fixed
        if batch is None:
            idx = torch.randint(len(train), (prompts,), generator=rng).tolist()
            batch = []
            for i in idx:
                row = train[i]
                comps = sample_ids(model, tokenizer, row["prompt"], group_size, max_new)
                batch.append((row, comps, None))
        model.train()
        opt.zero_grad()
        for row, comps, old in batch:
            pids = tokenizer(row["prompt"])["input_ids"]
            r = rewards_of(tokenizer, row["prompt"], row["answer"], comps)
            accs.append(float(r.mean()))
            adv = group_advantages(r, group_size, scale_by_std=False)
            logp, mask = token_logps(model, pids, comps)
            if old is None:
                per_tok = logp
            else:  # PPO clipped surrogate on a fixed batch (several updates per batch)
                ratio = torch.exp(logp - old)
                a = adv.unsqueeze(1)
                per_tok = torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
                adv = torch.ones_like(adv)
            row_score = (per_tok * mask).sum(1) / mask.sum(1)
            loss = -(adv * row_score).sum() / (len(batch) * group_size)
            loss.backward()
        opt.step()
    return {"mean_acc": sum(accs) / max(len(accs), 1)}


def row_gradients(model, prompt_ids, completions, weights: torch.Tensor) -> torch.Tensor:
    """``h_i = grad (1/|o_i|) sum_t sg(w_it) log pi(o_it)`` of every row, (N, P)."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    out = []
    for i, comp in enumerate(completions):
        logp, mask = token_logps(model, prompt_ids, [comp])
        score = (weights[i, : mask.shape[1]] * logp[0] * mask[0]).sum() / mask.sum()
        grads = torch.autograd.grad(score, params)
        out.append(torch.cat([g.reshape(-1) for g in grads]).double())
    return torch.stack(out)


def group_rule_advantages(rewards, delta_frozen, delta_sampling, group_size, scale_by_std):
    """Advantages (N,) of each rule of MODEL_RULES."""
    out = {"plain": group_advantages(rewards, group_size, scale_by_std=scale_by_std)}
    for name, delta in (("frozen", delta_frozen), ("sampling", delta_sampling)):
        for bound in BOUNDS:
            out[f"rcc_{name}_{bound}"] = rcc_advantages(
                rewards, delta, group_size, bound=bound, scale_by_std=scale_by_std
            )
    return out


def gram_of_groups(adv: torch.Tensor, h: torch.Tensor, group_size: int) -> torch.Tensor:
    """Gram matrix (M, M) of the group estimates g_m = (1/G) sum_{i in m} A_i h_i."""
    est = (adv.double().unsqueeze(1) * h).view(-1, group_size, h.shape[1]).sum(1) / group_size
    return est @ est.T


def trace_cov_from_gram(gram: torch.Tensor, pick: torch.Tensor | None = None) -> tuple:
    """(tr Cov, |E g|^2 estimate) of the group estimates from their Gram matrix.

    ``pick``: indices of a bootstrap resample of the groups.
    """
    if pick is not None:
        gram = gram[pick][:, pick]
    m = gram.shape[0]
    total = gram.sum() / (m * m)  # |mean g|^2
    tr = (gram.diagonal().sum() - m * total) / (m - 1)
    return float(tr), float(total - tr / m)


def model_study(args) -> dict:
    """Very-large-sample gradient variance on the embedded model (module docstring)."""
    import copy

    torch.manual_seed(args.seed)
    ref, tokenizer, train = load_policy(args.model_dir, args.seed)
    g = args.group_size
    if args.max_new is None:
        from contrastive_rlvr.embedded import max_completion_tokens

        args.max_new = max_completion_tokens(train, tokenizer)
    t0 = time.time()
    old = copy.deepcopy(ref)
    warm = rl_steps(
        old,
        tokenizer,
        train,
        steps=args.rl_steps,
        prompts=8,
        group_size=g,
        lr=args.lr,
        max_new=args.max_new,
        seed=args.seed,
    )
    # pi_theta for several updates per batch: a few clipped updates on one pi_old batch.
    theta = copy.deepcopy(old)
    rng = torch.Generator().manual_seed(args.seed + 1)
    fixed = []
    for i in torch.randint(len(train), (8,), generator=rng).tolist():
        row = train[i]
        comps = sample_ids(old, tokenizer, row["prompt"], g, args.max_new)
        with torch.no_grad():
            lp, _ = token_logps(old, tokenizer(row["prompt"])["input_ids"], comps)
        fixed.append((row, comps, lp))
    rl_steps(
        theta,
        tokenizer,
        train,
        steps=args.drift_updates,
        prompts=8,
        group_size=g,
        lr=args.lr,
        max_new=args.max_new,
        seed=args.seed,
        clip=0.2,
        fixed=fixed,
    )
    print(
        f"pi_old: {args.rl_steps} RL steps (train acc {warm['mean_acc']:.3f}), "
        f"pi_theta: +{args.drift_updates} updates; {time.time() - t0:.0f} s",
        flush=True,
    )

    rng = torch.Generator().manual_seed(args.seed + 2)
    picks = torch.randperm(len(train), generator=rng)[: args.prompts].tolist()
    prompt_rows = [train[i] for i in picks]
    n = args.groups * g
    results = {"args": vars(args), "rl_train_acc": warm["mean_acc"], "regimes": {}}
    for regime in REGIMES:
        sampler = ref if regime == "from_ref" else old
        policy = theta if regime == "drifted" else old
        per_prompt = []
        for row in prompt_rows:
            pids = tokenizer(row["prompt"])["input_ids"]
            comps = sample_ids(sampler, tokenizer, row["prompt"], n, args.max_new)
            r = rewards_of(tokenizer, row["prompt"], row["answer"], comps).double()
            with torch.no_grad():
                lp_ref, mask = token_logps(ref, pids, comps)
                lp_old, _ = token_logps(old, pids, comps)
                lp_pol, _ = token_logps(policy, pids, comps)
            lp_q = lp_ref if regime == "from_ref" else lp_old
            log_w = (lp_pol - lp_q) * mask  # GRPO's token ratio pi_theta / q
            lengths = mask.sum(1)
            base = lp_pol if regime == "from_ref" else lp_old
            # RCC's delta: the per-token mean (rcc_delta='mean', the default) or the sequence
            # log-ratio the paper writes ('sum'), as --delta says.
            per = lengths if args.delta == "mean" else torch.ones_like(lengths)
            d_frozen = ((base - lp_ref) * mask).sum(1) / per
            d_sampling = log_w.sum(1) / per
            h = row_gradients(policy, pids, comps, torch.exp(log_w))
            entry = {
                "acc": float(r.mean()),
                "grams": {},
                "abs_log_w": float((log_w.abs() * mask).sum() / mask.sum()),
                "clip_frac": float((((log_w.exp() - 1).abs() > 0.2) * mask).sum() / mask.sum()),
                "cov_frozen": float(group_cov(r, d_frozen.double(), g)),
                "cov_sampling": float(group_cov(r, d_sampling.double(), g)),
            }
            for scale in (False, True):
                rules = group_rule_advantages(r, d_frozen.double(), d_sampling.double(), g, scale)
                for name, adv in rules.items():
                    entry["grams"][f"{name}|{scale}"] = gram_of_groups(adv, h, g)
            sq = h.pow(2).sum(1)
            b_opt = float((r * sq).sum() / sq.sum())
            entry["grams"]["optimal|False"] = gram_of_groups(r - b_opt, h, g)
            entry["b_opt"] = b_opt
            per_prompt.append(entry)
        results["regimes"][regime] = summarise_model(per_prompt, args.bootstrap, args.seed)
        print_model_regime(regime, results["regimes"][regime], flush=True)
    return results


def group_cov(r: torch.Tensor, d: torch.Tensor, g: int) -> torch.Tensor:
    """Mean over groups of the population Cov(R, delta)."""
    rg, dg = r.view(-1, g), d.view(-1, g)
    return ((rg - rg.mean(1, keepdim=True)) * (dg - dg.mean(1, keepdim=True))).mean(1).mean()


def summarise_model(per_prompt: list[dict], bootstrap: int, seed: int) -> dict:
    """Ratios to plain of the summed tr Cov and of tr Cov / |E g|^2, with bootstrap 95% CIs."""
    keys = list(per_prompt[0]["grams"])
    rng = torch.Generator().manual_seed(seed)

    def totals(picks):
        out = {}
        for k in keys:
            tr = sig = 0.0
            for e, pick in zip(per_prompt, picks, strict=True):
                a, b = trace_cov_from_gram(e["grams"][k], pick)
                tr, sig = tr + a, sig + b
            out[k] = (tr, sig)
        return out

    def ratios(tot):
        out = {}
        for k in keys:
            plain = tot[f"plain|{k.split('|')[1]}"]
            out[k] = {
                "var": tot[k][0] / plain[0],
                "nsr": (tot[k][0] / tot[k][1]) / (plain[0] / plain[1]),
            }
        return out

    point = ratios(totals([None] * len(per_prompt)))
    m = per_prompt[0]["grams"][keys[0]].shape[0]
    boots = [
        ratios(totals([torch.randint(m, (m,), generator=rng) for _ in per_prompt]))
        for _ in range(bootstrap)
    ]
    summary = {}
    for k in keys:
        row = {}
        for what in ("var", "nsr"):
            vals = sorted(b[k][what] for b in boots)
            lo, hi = vals[int(0.025 * len(vals))], vals[int(0.975 * len(vals)) - 1]
            row[what] = [point[k][what], lo, hi]
        summary[k] = row
    plain_tot = totals([None] * len(per_prompt))
    return {
        "ratios": summary,
        "plain_trcov": {s: plain_tot[f"plain|{s}"][0] for s in ("False", "True")},
        "acc": sum(e["acc"] for e in per_prompt) / len(per_prompt),
        "abs_log_w": sum(e["abs_log_w"] for e in per_prompt) / len(per_prompt),
        "clip_frac": sum(e["clip_frac"] for e in per_prompt) / len(per_prompt),
        "cov_frozen": sum(e["cov_frozen"] for e in per_prompt) / len(per_prompt),
        "cov_sampling": sum(e["cov_sampling"] for e in per_prompt) / len(per_prompt),
        "b_opt": [e["b_opt"] for e in per_prompt],
        "prompt_acc": [e["acc"] for e in per_prompt],
    }


def print_model_regime(regime: str, res: dict, flush: bool = False) -> None:
    print(
        f"\n## {regime}: acc {res['acc']:.3f}, mean |log w_t| {res['abs_log_w']:.4f}, "
        f"tokens outside the 0.2 clip band {res['clip_frac']:.3f}, Cov(R, delta) frozen "
        f"{res['cov_frozen']:.4f} sampling {res['cov_sampling']:.4f}",
        flush=flush,
    )
    for key, row in res["ratios"].items():
        v, nsr = row["var"], row["nsr"]
        print(
            f"{key:32} tr Cov {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]   "
            f"NSR {nsr[0]:.3f} [{nsr[1]:.3f}, {nsr[2]:.3f}]",
            flush=flush,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="study", required=True)
    b = sub.add_parser("bandit")
    b.add_argument("--answers", type=int, default=12)
    b.add_argument("--correct", type=int, default=4)
    b.add_argument("--group-size", type=int, default=8)
    b.add_argument("--shifts", default="-1,0.5,1,2")
    b.add_argument("--drift", type=float, default=0.2)
    b.add_argument("--json", default=None)
    m = sub.add_parser("model")
    m.add_argument("--model-dir", default=None, help="saved warm start (default: build one)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rl-steps", type=int, default=40, help="on-policy updates giving pi_old")
    m.add_argument("--drift-updates", type=int, default=3, help="updates giving pi_theta")
    m.add_argument("--lr", type=float, default=1e-4)
    m.add_argument("--group-size", type=int, default=8)
    m.add_argument("--prompts", type=int, default=12)
    m.add_argument("--groups", type=int, default=48, help="groups per prompt")
    m.add_argument("--max-new", type=int, default=None, help="default: the task's budget")
    m.add_argument("--bootstrap", type=int, default=300)
    m.add_argument(
        "--delta",
        choices=("mean", "sum"),
        default="mean",
        help="RCC delta: per-token mean (the default rcc_delta) or the sequence sum (the paper)",
    )
    m.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    if args.study == "bandit":
        results = bandit_study(
            num_answers=args.answers,
            num_correct=args.correct,
            group_size=args.group_size,
            shifts=tuple(float(s) for s in args.shifts.split(",")),
            drift=args.drift,
        )
        print_bandit(results)
    else:
        results = model_study(args)
    print(f"\n{time.time() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
