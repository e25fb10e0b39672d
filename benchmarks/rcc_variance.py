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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="study", required=True)
    b = sub.add_parser("bandit")
    b.add_argument("--answers", type=int, default=12)
    b.add_argument("--correct", type=int, default=4)
    b.add_argument("--group-size", type=int, default=8)
    b.add_argument("--shifts", default="0.5,1,2")
    b.add_argument("--drift", type=float, default=0.2)
    b.add_argument("--json", default=None)
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
    print(f"\n{time.time() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
