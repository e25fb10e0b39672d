"""verl's ConSPO loss normalises by the window's usable groups, as the TRL path does: the
gradient of a window is the same for one micro-batch or several, one rank or two, and
equals the hand-computed mean over the usable groups.

Needs verl (the Makefile's .venv-verl); skipped where verl is not installed.
"""

from __future__ import annotations

import math

import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from contrastive_rlvr.integrations.verl import groups  # noqa: E402
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig  # noqa: E402

torch.set_num_threads(1)

G, TAU, MARGIN = 2, 10.0, 0.01
# Four groups of two, in order A, B, C, D: A and C have a positive and a negative (usable),
# B is all negative, D all positive. Two tokens a row; each row's score s is their mean.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
INDEX = ["A", "A", "B", "B", "C", "C", "D", "D"]
TOKENS = torch.tensor(
    [
        [-0.5, -1.5],  # A+, s = -1
        [-2.5, -1.5],  # A-, s = -2
        [-1.0, -0.6],  # B-
        [-0.3, -0.9],  # B-
        [-0.2, -0.8],  # C+, s = -0.5
        [-3.5, -2.5],  # C-, s = -3
        [-0.1, -0.7],  # D+
        [-1.1, -0.4],  # D+
    ]
)
SCORES = {"A": (-1.0, -2.0), "C": (-0.5, -3.0)}  # (s+, s-) of the usable groups
USABLE = 2


def by_hand() -> tuple[float, torch.Tensor]:
    """The window's loss, mean over its usable groups of -J(q), and its gradient on the
    token log-probs: J = tau log(e^a / (e^a + e^b)), a = (s+ - m) / tau, b = s- / tau, so
    -J = tau log(1 + e^(b - a)); dJ/ds+ = 1 - P = -dJ/ds-, P = 1 / (1 + e^(b - a)), and
    ds/dlogp_t = 1/2 for each of a row's two tokens."""
    loss, grad = 0.0, torch.zeros(8, 2, dtype=torch.float64)
    for group, rows in (("A", (0, 1)), ("C", (4, 5))):
        s_pos, s_neg = SCORES[group]
        a, b = (s_pos - MARGIN) / TAU, s_neg / TAU
        loss += TAU * math.log(1 + math.exp(b - a)) / USABLE
        one_minus_p = 1 - 1 / (1 + math.exp(b - a))
        grad[rows[0]] = -one_minus_p / (USABLE * 2)
        grad[rows[1]] = one_minus_p / (USABLE * 2)
    return loss, grad


def targets() -> torch.Tensor:
    """(8, 2) advantages as the crlvr_conspo estimator writes them for this batch, at a
    progress past the margin's warmup (m = max_margin = 0.01)."""
    adv, _ = core_algos.get_adv_estimator_fn("crlvr_conspo")(
        # the reward on the last token, as verl puts it
        token_level_rewards=torch.stack([torch.zeros(8), REWARDS], dim=1),
        response_mask=torch.ones(8, 2),
        index=INDEX,
        progress=1.0,
        max_margin=MARGIN,
    )
    return adv


def actor(info: dict | None = None) -> ActorConfig:
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=G,
        ppo_micro_batch_size_per_gpu=G,
        policy_loss=CrlvrPolicyLossConfig(loss_mode="crlvr_conspo", conspo_tau=TAU),
    )
    cfg.global_batch_info.update(info or {})
    return cfg


def micro_loss(logp: torch.Tensor, adv: torch.Tensor, rows: slice, cfg: ActorConfig):
    fn = core_algos.get_policy_loss_fn("crlvr_conspo")
    loss, _ = fn(
        old_log_prob=torch.zeros_like(logp[rows]),
        log_prob=logp[rows],
        advantages=adv[rows],
        response_mask=torch.ones_like(logp[rows]),
        loss_agg_mode="token-mean",
        config=cfg,
        rollout_is_weights=None,
    )
    return loss


def window(splits_per_rank: list[list[slice]], info: dict | None) -> tuple[float, torch.Tensor]:
    """verl's step: each rank sums its micro-batch losses; DDP averages the ranks."""
    logp = TOKENS.clone().requires_grad_(True)
    adv = targets()
    cfg = actor(info)
    per_rank = [sum(micro_loss(logp, adv, mb, cfg) for mb in mbs) for mbs in splits_per_rank]
    total = sum(per_rank) / len(per_rank)
    (grad,) = torch.autograd.grad(total, logp)
    return float(total.detach()), grad.double()


def test_estimator_carries_the_window_scale_by_hand():
    # 4 groups, 2 usable: negatives carry -4/2 = -2, positives 1 + m.
    assert groups.conspo_window_scale(REWARDS > 0.5, INDEX) == 2.0
    want = [1.01, -2.0, -2.0, -2.0, 1.01, -2.0, 1.01, 1.01]
    assert targets()[:, 0].tolist() == pytest.approx(want, abs=1e-6)
    positive, margin, scale = groups.decode_conspo_targets(targets(), torch.ones(8, 2))
    assert positive.tolist() == (REWARDS > 0.5).tolist()
    assert margin == pytest.approx(MARGIN, abs=1e-6) and scale == 2.0
    # every group usable: the scale is 1 and the targets are the plain -1 / 1 + m
    assert groups.conspo_window_scale(torch.tensor([True, False, False, True]), [0, 0, 1, 1]) == 1.0


@pytest.mark.parametrize(
    "splits",
    [
        [[slice(0, 8)]],  # one micro-batch
        [[slice(0, 4), slice(4, 8)]],  # two micro-batches of two groups
        [[slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]],  # four of one group
    ],
    ids=["1-micro", "2-micro", "4-micro"],
)
def test_one_rank_any_micro_batch_split_gives_the_window_mean(splits):
    want_loss, want_grad = by_hand()
    loss, grad = window(splits, {"dp_size": 1, "global_batch_size": 8})
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert torch.allclose(grad, want_grad, atol=1e-6), (grad - want_grad).abs().max()


def test_without_global_info_the_call_is_its_own_window():
    # A direct call (no verl engine, no global batch info) takes its rows as the whole
    # mini-batch: one call on the window gives the window mean.
    want_loss, want_grad = by_hand()
    loss, grad = window([[slice(0, 8)]], None)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert torch.allclose(grad, want_grad, atol=1e-6)


@pytest.mark.parametrize(
    "splits",
    [
        [[slice(0, 4)], [slice(4, 8)]],  # two ranks, one micro-batch each
        [[slice(0, 2), slice(2, 4)], [slice(4, 6), slice(6, 8)]],  # and two each
    ],
    ids=["1-micro", "2-micro"],
)
def test_two_ranks_give_the_window_mean(splits):
    want_loss, want_grad = by_hand()
    loss, grad = window(splits, {"dp_size": 2, "global_batch_size": 8})
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert torch.allclose(grad, want_grad, atol=1e-6), (grad - want_grad).abs().max()


def test_a_mini_batch_takes_its_share_of_the_window():
    # Two optimizer steps of 4 rows each (ppo_mini_batch_size 2 prompts): the first holds
    # groups A and B, one usable group of the window's two; its divisor is the window's
    # usable groups x its share of the batch, 2 x 4/8 = 1, as TRL's conspo_groups x share.
    s_pos, s_neg = SCORES["A"]
    a, b = (s_pos - MARGIN) / TAU, s_neg / TAU
    want = TAU * math.log(1 + math.exp(b - a)) / 1.0
    logp = TOKENS.clone()
    loss = micro_loss(logp, targets(), slice(0, 4), actor({"dp_size": 1, "global_batch_size": 4}))
    assert float(loss) == pytest.approx(want, rel=1e-5)
