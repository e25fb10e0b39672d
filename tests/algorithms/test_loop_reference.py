"""A slow, loop-by-loop reference of every formula, written from docs/algorithms.md without
the package's helpers, compared with the vectorised code on random inputs (values and,
where there is a gradient, gradients). The loops touch only real tokens: padding cells
are filled with junk so that any masking slip in the vectorised code shows."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from contrastive_rlvr.algorithms import (
    collapse_rate,
    conspo_loss,
    group_advantages,
    policy_loss,
    rcc_advantages,
    sequence_delta,
)

torch.set_num_threads(1)
SEEDS = range(6)


# ----------------------------------------------------------------------------- reference


def ref_group_advantages(rewards, g, scale_by_std=True, eps=1e-6):
    out = []
    for start in range(0, len(rewards), g):
        r = rewards[start : start + g]
        if all(x == r[0] for x in r):
            out += [0.0] * g
            continue
        mean = sum(r) / g
        std = statistics.stdev(r)  # Bessel
        out += [(x - mean) / (std + eps) if scale_by_std else x - mean for x in r]
    return out


def ref_rcc_advantages(
    rewards, delta, g, coef=2.0, scale_by_std=True, eps=1e-6, bound="reward_range"
):
    out = []
    for start in range(0, len(rewards), g):
        r, d = rewards[start : start + g], delta[start : start + g]
        if all(x == r[0] for x in r):
            out += [0.0] * g
            continue
        mr, md = sum(r) / g, sum(d) / g
        cov = sum((x - mr) * (y - md) for x, y in zip(r, d, strict=True)) / g  # population
        b = mr + coef * cov
        if bound == "reward_range":
            b = min(max(b, min(r)), max(r))
        std = statistics.stdev(r)
        out += [(x - b) / (std + eps) if scale_by_std else x - b for x in r]
    return out


def ref_sequence_delta(logp, ref, lengths, reduce):
    out = []
    for i, n in enumerate(lengths):
        s = sum(logp[i][t] - ref[i][t] for t in range(n))
        out.append(s / n if reduce == "mean" else s)
    return out


def k3(lp, lr):
    d = lr - lp
    return torch.exp(d) - d - 1


def ref_policy_loss(name, logp, old, adv, lengths, *, clip_low, clip_high, ref, beta, max_len):
    """Loops over rows and tokens; ``adv[i]`` is a number or a list per token."""
    b = len(lengths)

    def a(i, t):
        return adv[i][t] if isinstance(adv[i], list) else adv[i]

    def surrogate(ratio, advantage):
        clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
        return -torch.minimum(ratio * advantage, clipped * advantage)

    total = 0.0
    if name in ("grpo", "dapo", "dr_grpo"):
        n_tokens = sum(lengths)
        for i, n in enumerate(lengths):
            row = 0.0
            for t in range(n):
                term = surrogate(torch.exp(logp[i, t] - old[i, t]), a(i, t))
                row = row + term + beta * k3(logp[i, t], ref[i, t])
            if name == "grpo":
                total = total + row / n / b
            elif name == "dapo":
                total = total + row / n_tokens
            else:
                total = total + row / max_len / b
        return total
    for i, n in enumerate(lengths):
        kl = sum(k3(logp[i, t], ref[i, t]) for t in range(n)) / n
        if name == "gspo":
            s = torch.exp(sum(logp[i, t] - old[i, t] for t in range(n)) / n)
            total = total + (surrogate(s, a(i, 0)) + beta * kl) / b
        elif name == "gspo_token":
            s = torch.exp(sum(logp[i, t] - old[i, t] for t in range(n)) / n).detach()
            row = 0.0
            for t in range(n):
                ratio = s * torch.exp(logp[i, t] - logp[i, t].detach())
                row = row + surrogate(ratio, a(i, t))
            total = total + (row / n + beta * kl) / b
        elif name == "gmpo":
            d_sum = 0.0
            for t in range(n):
                d = logp[i, t] - old[i, t]
                c = d.clamp(-clip_low, clip_high)
                d_sum = d_sum + (torch.minimum(d, c) if a(i, t) > 0 else torch.maximum(d, c))
            total = total + (-a(i, 0) * torch.exp(d_sum / n) + beta * kl) / b
    return total


def ref_conspo(logp, lengths, rewards, g, tau, margin, threshold):
    objectives = []
    for start in range(0, len(lengths), g):
        rows = range(start, start + g)
        scores = {i: sum(logp[i, t] for t in range(lengths[i])) / lengths[i] for i in rows}
        pos = [i for i in rows if rewards[i] > threshold]
        neg = [i for i in rows if rewards[i] <= threshold]
        if not pos or not neg:
            continue
        neg_sum = sum(torch.exp(scores[j] / tau) for j in neg)
        j = 0.0
        for i in pos:
            num = torch.exp((scores[i] - margin) / tau)
            j = j + tau * torch.log(num / (num + neg_sum))
        objectives.append(j / len(pos))
    return -sum(objectives) / len(objectives) if objectives else torch.zeros(())


# ----------------------------------------------------------------------------- random inputs


def random_batch(seed: int, token_adv: bool = False):
    gen = torch.Generator().manual_seed(seed)
    g = [2, 3, 4, 8][seed % 4]
    b, t = g * 3, 7
    lengths = torch.randint(1, t + 1, (b,), generator=gen).tolist()
    mask = (torch.arange(t) < torch.tensor(lengths).unsqueeze(1)).long()
    logp = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 2
    old = logp + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.25
    ref = logp + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3
    rewards = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)[
        torch.randint(0, 3, (b,), generator=gen)
    ]
    rewards[:g] = 1.0  # one collapsed group in every batch ...
    rewards[g : g + 2] = torch.tensor([1.0, 0.0])  # ... and at least one usable by ConSPO
    adv = (
        torch.randn(b, t, generator=gen, dtype=torch.float64)
        if token_adv
        else torch.randn(b, generator=gen, dtype=torch.float64)
    )
    junk = torch.tensor([math.nan, math.inf, 1e9, -math.inf], dtype=torch.float64)
    pad = mask == 0
    fill = junk[torch.randint(0, 4, (b, t), generator=gen)]
    return dict(
        g=g,
        lengths=lengths,
        mask=mask,
        rewards=rewards,
        adv=adv,
        logp=torch.where(pad, fill, logp),
        old=torch.where(pad, fill.flip(0), old),
        ref=torch.where(pad, fill.flip(1), ref),
    )


# ----------------------------------------------------------------------------- comparisons


@pytest.mark.parametrize("seed", SEEDS)
def test_advantages_against_loops(seed):
    x = random_batch(seed)
    r, g = x["rewards"], x["g"]
    delta = torch.randn(
        r.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    for scale in (True, False):
        torch.testing.assert_close(
            group_advantages(r, g, scale_by_std=scale),
            torch.tensor(ref_group_advantages(r.tolist(), g, scale), dtype=torch.float64),
        )
        for coef in (2.0, 0.5):
            for bound in ("none", "reward_range"):
                torch.testing.assert_close(
                    rcc_advantages(r, delta, g, coef=coef, scale_by_std=scale, bound=bound),
                    torch.tensor(
                        ref_rcc_advantages(r.tolist(), delta.tolist(), g, coef, scale, bound=bound),
                        dtype=torch.float64,
                    ),
                )
    groups = [r[i : i + g].tolist() for i in range(0, len(r), g)]
    expected = sum(all(v == grp[0] for v in grp) for grp in groups) / len(groups)
    assert collapse_rate(r, g).item() == pytest.approx(expected)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_sequence_delta_against_loops(seed, reduce):
    x = random_batch(seed)
    torch.testing.assert_close(
        sequence_delta(x["logp"], x["ref"], x["mask"], reduce=reduce),
        torch.tensor(
            ref_sequence_delta(x["logp"].tolist(), x["ref"].tolist(), x["lengths"], reduce),
            dtype=torch.float64,
        ),
    )


CASES = [(n, False) for n in ("grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "gmpo")] + [
    (n, True) for n in ("grpo", "dapo", "dr_grpo", "gspo_token")
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "token_adv"), CASES)
def test_policy_losses_against_loops(seed, name, token_adv):
    x = random_batch(seed, token_adv)
    clip = (0.2, 0.28) if name != "gmpo" else (0.2, 0.3)
    if name.startswith("gspo"):
        clip = (0.05, 0.08)  # wide enough that some rows are clipped and some are not
    opts = dict(clip_low=clip[0], clip_high=clip[1], ref_logp=x["ref"], beta=0.07)
    if name in ("grpo", "dapo", "dr_grpo"):
        opts["max_len"] = 9
    logp = x["logp"].clone().requires_grad_(True)
    loss, _ = policy_loss(name, logp, x["old"], x["adv"], x["mask"], **opts)
    (grad,) = torch.autograd.grad(loss, logp)

    ref_logp = x["logp"].clone().requires_grad_(True)
    adv = x["adv"].tolist()
    expected = ref_policy_loss(
        name,
        ref_logp,
        x["old"],
        adv,
        x["lengths"],
        clip_low=clip[0],
        clip_high=clip[1],
        ref=x["ref"],
        beta=0.07,
        max_len=9,
    )
    (ref_grad,) = torch.autograd.grad(expected, ref_logp)
    torch.testing.assert_close(loss, expected)
    ref_grad = torch.where(x["mask"].bool(), ref_grad, torch.zeros_like(ref_grad))
    torch.testing.assert_close(grad, ref_grad)
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("tau", "margin"), [(10.0, 0.0), (1.0, 0.3)])
def test_conspo_against_loops(seed, tau, margin):
    x = random_batch(seed)
    logp = x["logp"].clone().requires_grad_(True)
    loss, _ = conspo_loss(logp, x["mask"], x["rewards"], x["g"], tau=tau, margin=margin)
    ref_logp = x["logp"].clone().requires_grad_(True)
    expected = ref_conspo(ref_logp, x["lengths"], x["rewards"].tolist(), x["g"], tau, margin, 0.5)
    torch.testing.assert_close(loss, expected)
    (grad,) = torch.autograd.grad(loss, logp)
    (ref_grad,) = torch.autograd.grad(expected, ref_logp)
    torch.testing.assert_close(grad, torch.where(x["mask"].bool(), ref_grad, 0.0))
