"""RCC over stale rows, exactly, on the RCC variance study's bandit (docs/algorithms.md,
"Stale rollouts"; the bandit of ``benchmarks/rcc_variance.py``, regime ``drifted``).

The setting of verl's asynchronous modes: rows are drawn by the sampler ``mu = pi_old``
(the weights k versions ago); the trainer's proximal policy ``pi = pi_theta`` is
``pi_old`` with the right answers' logits raised by ``drift`` more (what k updates did);
RCC's ``delta = log pi - log pi_ref`` (the proximal policy's, as verl's ``old_log_probs``
give it); the policy gradient is importance-weighted (``w = pi / mu``, the bandit's
``h = w * score``). Two rules for RCC's group mean and covariance over those rows
(``rcc_offpolicy``):

- ``as_sampled``: the rows as if drawn from ``pi``;
- ``importance_weighted``: weighted by ``w``, self-normalised in the group
  (:func:`contrastive_rlvr.integrations.verl.offpolicy.group_weighted_baseline`, the code
  the trainer runs).

Exact, by summing over every group of G draws: each rule's expected baseline over groups
drawn by ``mu`` against the same baseline over groups drawn by ``pi`` (what RCC computes
on-policy, finite G and all: the difference is the staleness bias alone), both over the
groups whose rewards differ (an all-equal group has no gradient, whatever its baseline);
and the update's ``E[g_hat]`` against the true gradient at ``pi`` (norm ratio, cosine)
and its noise (``tr Cov / |E g_hat|^2``), with the plain group mean for reference.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rcc_staleness.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from rcc_variance import _moments, bandit_policies

from contrastive_rlvr.algorithms import group_advantages
from contrastive_rlvr.algorithms.gradient_variance import (
    composition_log_probs,
    composition_rows,
    compositions,
    softmax_scores,
)
from contrastive_rlvr.integrations.verl.offpolicy import group_weighted_baseline

RULES = ("as_sampled", "importance_weighted")


def expected_baseline(b: torch.Tensor, rewards: torch.Tensor, p: torch.Tensor, g: int) -> float:
    """``E[b | the group's rewards differ]`` over groups of probability ``p`` (N,).

    Args:
        b, rewards: (N * g,) the rows' baseline and reward, group by group.
    """
    r = rewards.view(-1, g)
    mixed = ((r.amax(1) > r.amin(1)).double()) * p
    return float(mixed @ b.view(-1, g)[:, 0] / mixed.sum())


def staleness_study(
    *,
    num_answers: int = 12,
    num_correct: int = 4,
    group_size: int = 8,
    shifts: tuple[float, ...] = (0.5, 1.0, 2.0),
    drifts: tuple[float, ...] = (0.2, 0.5, 1.0),
    coef: float = 2.0,
) -> list[dict]:
    """One row per (shift, drift): each rule's baseline bias and gradient moments."""
    counts = compositions(num_answers, group_size)
    rows = composition_rows(counts)  # (N, G)
    out = []
    for shift in shifts:
        for drift in drifts:
            pol = bandit_policies(num_answers, num_correct, shift, drift, "drifted")
            log_p = composition_log_probs(counts, pol["q"])  # groups drawn by the sampler
            p = log_p.exp()
            scores = softmax_scores(pol["theta"])
            h = pol["weights"].unsqueeze(1) * scores
            pi = torch.softmax(pol["theta"], 0)
            true_grad = (pi * pol["rewards"]) @ scores
            # the proximal policy's delta (verl's old_log_probs are pi's, not mu's)
            ref = torch.zeros(num_answers, dtype=torch.float64)
            delta = torch.log_softmax(pol["theta"], 0) - torch.log_softmax(ref, 0)
            rewards = pol["rewards"][rows].reshape(-1)
            d = delta[rows].reshape(-1)
            log_w = pol["weights"].log()[rows].reshape(-1)
            p_pi = composition_log_probs(counts, pi).exp()  # the same groups drawn by pi
            row = {
                "shift": shift,
                "drift": drift,
                "p_correct_sampler": float(pol["q"][:num_correct].sum()),
                "p_correct_proximal": float(pi[:num_correct].sum()),
                "b_on_policy": {},
                "plain": _moments(
                    group_advantages(rewards, group_size, scale_by_std=False), rows, log_p, h,
                    true_grad,
                ),
            }  # fmt: skip
            for rule in RULES:
                lw = log_w if rule == "importance_weighted" else torch.zeros_like(log_w)
                for bound in ("none", "reward_range"):
                    if bound not in row["b_on_policy"]:
                        plain_w = torch.zeros_like(log_w)
                        on = group_weighted_baseline(group_size, rewards, d, plain_w, coef, bound)
                        row["b_on_policy"][bound] = expected_baseline(on, rewards, p_pi, group_size)
                    target = row["b_on_policy"][bound]
                    b = group_weighted_baseline(group_size, rewards, d, lw, coef, bound)
                    expected = expected_baseline(b, rewards, p, group_size)
                    row[f"{rule}_{bound}"] = {
                        "expected_b": expected,
                        "bias": expected - target,
                        **_moments(rewards - b, rows, log_p, h, true_grad),
                    }
            out.append(row)
    return out


def print_study(results: list[dict]) -> None:
    for bound in ("reward_range", "none"):
        print(f"\n## rcc_bound: {bound}")
        print(
            "shift drift p(right) mu->pi  b_on  | bias: as_sampled  weighted "
            "| |E g|/|g_true|: plain  as_sampled  weighted | NSR / plain: as_sampled  weighted"
        )
        for r in results:
            a, w, pl = r[f"as_sampled_{bound}"], r[f"importance_weighted_{bound}"], r["plain"]
            print(
                f"{r['shift']:5.1f} {r['drift']:5.1f} {r['p_correct_sampler']:.3f}->"
                f"{r['p_correct_proximal']:.3f} {r['b_on_policy'][bound]:6.3f} | "
                f"{a['bias']:+16.4f} {w['bias']:+9.4f} | "
                f"{pl['mean_over_true']:21.3f} {a['mean_over_true']:11.3f} "
                f"{w['mean_over_true']:9.3f} | "
                f"{a['nsr'] / pl['nsr']:24.3f} {w['nsr'] / pl['nsr']:9.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=12)
    parser.add_argument("--correct", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--shifts", default="0.5,1,2")
    parser.add_argument("--drifts", default="0.2,0.5,1")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    results = staleness_study(
        num_answers=args.answers,
        num_correct=args.correct,
        group_size=args.group_size,
        shifts=tuple(float(s) for s in args.shifts.split(",")),
        drifts=tuple(float(s) for s in args.drifts.split(",")),
    )
    print_study(results)
    print(f"\n{time.time() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
