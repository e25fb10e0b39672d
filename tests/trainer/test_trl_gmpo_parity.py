"""The project's ``gmpo`` loss against TRL's own GMPO (``trl.experimental.gmpo.GMPOTrainer.
_compute_loss``, trl 1.16) on the same inputs: loss value and gradient with respect to the
per-token log-probs, and both against a case worked by hand from the paper's objective
(arXiv:2507.20673: geometric mean of the token ratios clipped in log space, sign-aware).
TRL's ``_compute_loss`` is called on a stand-in trainer that hands it the log-probs, so no
model, data or generation is involved. docs/trl-parity.md lists what differs."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl.experimental.gmpo import GMPOTrainer

from contrastive_rlvr.algorithms import policy_loss


def trl_gmpo(logp, old, advantages, mask, *, eps=0.4, beta=0.0, ref=None, accum=1):
    """TRL's GMPO loss on these per-token log-probs (B, T), and their gradient (B, T)."""
    leaf = logp.clone().requires_grad_(True)
    rows, width = mask.shape
    stand_in = SimpleNamespace(
        top_entropy_quantile=1.0,
        epsilon_low=eps,
        epsilon_high=eps,
        beta=beta,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accum,
        _metrics={"train": defaultdict(list)},
        accelerator=SimpleNamespace(reduce=lambda t, reduction: t, gather=lambda t: t),
        _get_per_token_logps_and_entropies=lambda *a, **k: (leaf, torch.zeros_like(leaf), None),
    )
    inputs = {
        "prompt_ids": torch.ones(rows, 2, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
        "completion_ids": torch.ones(rows, width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old,
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    loss = GMPOTrainer._compute_loss(stand_in, None, inputs)
    loss.backward()
    return loss.detach(), leaf.grad


def project_gmpo(logp, old, advantages, mask, *, eps=0.4, beta=0.0, ref=None, accum=1):
    leaf = logp.clone().requires_grad_(True)
    loss, _ = policy_loss(
        "gmpo", leaf, old, advantages, mask.float(), clip_low=eps, clip_high=eps, beta=beta,
        ref_logp=ref, num_rows=mask.size(0) * accum,
    )  # fmt: skip
    loss.backward()
    return loss.detach(), leaf.grad


def test_a_case_worked_by_hand():
    # Row 0, A = +1, d = (0.6, 0): the 0.6 is cut to 0.4, w = exp(0.2).
    # Row 1, A = -1, d = (-0.6, 0.2): the -0.6 is cut to -0.4, w = exp(-0.1).
    # loss = -(e^0.2 - e^-0.1) / 2; only the uncut tokens have a gradient:
    # d loss / d logp = -A w / (B |o|) = -e^0.2 / 4 and +e^-0.1 / 4.
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]])
    old = logp - torch.tensor([[0.6, 0.0], [-0.6, 0.2]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2, dtype=torch.long)
    want_loss = -(math.exp(0.2) - math.exp(-0.1)) / 2
    want_grad = torch.tensor([[0.0, -math.exp(0.2) / 4], [0.0, math.exp(-0.1) / 4]])
    for impl in (trl_gmpo, project_gmpo):
        loss, grad = impl(logp, old, adv, mask)
        assert float(loss) == pytest.approx(want_loss, rel=1e-6), impl.__name__
        torch.testing.assert_close(grad, want_grad, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize(
    "options",
    [{}, {"beta": 0.04}, {"accum": 2}, {"eps": 0.2}, {"beta": 0.04, "accum": 4, "eps": 0.3}],
    ids=["paper", "kl", "accum", "narrow", "all"],
)
def test_project_gmpo_equals_trls(options):
    # float64: the two implementations sum in different orders; float32 rounding would
    # hide nothing but needs a looser tolerance.
    gen = torch.Generator().manual_seed(0)
    rows, width = 8, 7

    def rand() -> torch.Tensor:
        return torch.rand(rows, width, generator=gen, dtype=torch.float64)

    logp = -rand() * 3
    # Off policy by up to +-0.8 nats a token: both clip directions are hit.
    old = logp + (rand() - 0.5) * 1.6
    adv = torch.tensor([1.2, -0.7, 0.0, 0.5, -1.5, 0.9, -0.2, 0.0], dtype=torch.float64)
    mask = torch.ones(rows, width, dtype=torch.long)
    mask[1, 4:] = 0  # padded rows
    mask[5, 2:] = 0
    if options.get("beta"):
        options = {**options, "ref": logp + (rand() - 0.5)}
    trl_loss, trl_grad = trl_gmpo(logp, old, adv, mask, **options)
    our_loss, our_grad = project_gmpo(logp, old, adv, mask, **options)
    assert float(our_loss) == pytest.approx(float(trl_loss), rel=1e-12)
    torch.testing.assert_close(our_grad, trl_grad, atol=1e-14, rtol=1e-12)
    assert bool((trl_grad != 0).any())  # something was compared


def test_the_one_difference_a_log_ratio_past_20_nats():
    """The project's log ratios are clamped to +-20 nats (``LOG_RATIO_LIMIT``, against
    overflow); TRL's are not. With A > 0 and a token 30 nats below pi_old, TRL's weight
    is exp(-30 / 2) and the project's exp(-20 / 2); the gradient of that token is 0 in the
    project (clamped) and -A w / (B |o|) in TRL."""
    logp = torch.tensor([[-31.0, -1.0]])
    old = torch.tensor([[-1.0, -1.0]])
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.long)
    trl_loss, trl_grad = trl_gmpo(logp, old, adv, mask)
    our_loss, our_grad = project_gmpo(logp, old, adv, mask)
    assert float(trl_loss) == pytest.approx(-math.exp(-15.0), rel=1e-5)
    assert float(our_loss) == pytest.approx(-math.exp(-10.0), rel=1e-5)
    assert float(trl_grad[0, 0]) == pytest.approx(-math.exp(-15.0) / 2, rel=1e-5)
    assert float(our_grad[0, 0]) == 0.0
