"""The verl plugin: entry-point loading; losses and estimators vs the core and verl built-ins.

Needs verl (the Makefile's .venv-verl); skipped where verl is not installed.
"""

from __future__ import annotations

import math
import sys
from importlib.metadata import entry_points

import pytest

verl = pytest.importorskip("verl")
# `import verl` has just loaded the verl.plugins entry points: the plugin module must
# already be imported although nothing here imported it.
PLUGIN = "contrastive_rlvr.integrations.verl.plugin"
LOADED_BY_ENTRY_POINT = PLUGIN in sys.modules

import torch  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from contrastive_rlvr.algorithms import (  # noqa: E402
    group_advantages,
    policy_loss,
    rcc_advantages,
    sequence_delta,
)
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig  # noqa: E402
from contrastive_rlvr.integrations.verl.losses import CORE_LOSSES  # noqa: E402
from contrastive_rlvr.integrations.verl.trainer import CrlvrTrainer  # noqa: E402

torch.set_num_threads(1)

LOSS_NAMES = [f"crlvr_{n}" for n in CORE_LOSSES] + ["crlvr_conspo"]
ESTIMATOR_NAMES = [
    "crlvr_grpo",
    "crlvr_dr_grpo",
    "crlvr_rcc",
    "crlvr_dr_grpo_rcc",
    "crlvr_conspo",
    "crlvr_conspo_rcc",
]


def actor_config(loss_mode, *, low=0.2, high=0.2, agg="token-mean", rollout_n=2, info=None, **pl):
    """A verl actor config as the workers see it, with our policy-loss subclass."""
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=rollout_n,
        ppo_micro_batch_size_per_gpu=rollout_n,
        clip_ratio=0.2,
        clip_ratio_low=low,
        clip_ratio_high=high,
        loss_agg_mode=agg,
        policy_loss=CrlvrPolicyLossConfig(loss_mode=loss_mode, **pl),
    )
    cfg.global_batch_info.update(info or {})
    return cfg


def batch(seed=0, rows=4, tokens=5):
    """log-probs close to the old ones (|log ratio| < 0.5, so verl's dual clip at ratio 3
    never acts), padding with a loud value in masked cells, per-row advantages."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, tokens, generator=g) * 2
    logp = old + (torch.rand(rows, tokens, generator=g) - 0.5) * 0.8
    mask = torch.ones(rows, tokens)
    mask[1, 3:] = 0
    mask[3, 1:] = 0
    logp = torch.where(mask.bool(), logp, torch.full_like(logp, 3.0))
    adv_row = torch.tensor([1.2, -0.7, 0.4, -1.1])[:rows]
    return logp.requires_grad_(True), old, adv_row, mask


def call(name, logp, old, adv_tok, mask, cfg):
    fn = core_algos.get_policy_loss_fn(name)
    return fn(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv_tok,
        response_mask=mask,
        loss_agg_mode=cfg.loss_agg_mode,
        config=cfg,
        rollout_is_weights=None,
    )


def grad(loss, logp):
    (g,) = torch.autograd.grad(loss, logp)
    return g


# ----------------------------------------------------------------------------- loading


def test_plugin_is_loaded_by_the_entry_point_and_registers_every_name():
    eps = {e.name: e.value for e in entry_points(group="verl.plugins")}
    assert eps.get("contrastive_rlvr") == PLUGIN
    assert LOADED_BY_ENTRY_POINT, "import verl did not import the plugin"
    for name in LOSS_NAMES:
        assert name in core_algos.POLICY_LOSS_REGISTRY
    for name in ESTIMATOR_NAMES:
        assert name in core_algos.ADV_ESTIMATOR_REGISTRY
    assert get_trainer_cls("crlvr_sync") is CrlvrTrainer


def test_policy_loss_config_subclass_instantiates_through_hydra_target():
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    target = "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
    cfg = omega_conf_to_dataclass(
        OmegaConf.create({"_target_": target, "loss_mode": "crlvr_conspo", "conspo_tau": 5.0})
    )
    assert isinstance(cfg, CrlvrPolicyLossConfig)
    assert cfg.conspo_tau == 5.0 and cfg.rcc_coef == 2.0
    with pytest.raises(Exception, match="bicc_ratio_mode='both' is invalid"):
        omega_conf_to_dataclass(OmegaConf.create({"_target_": target, "bicc_ratio_mode": "both"}))


# ----------------------------------------------------------------------------- losses


GLOBAL = {"dp_size": 2, "batch_num_tokens": 30, "global_batch_size": 8, "loss_scale_factor": None}


@pytest.mark.parametrize("core", CORE_LOSSES)
def test_registered_loss_equals_core_function(core):
    logp, old, adv_row, mask = batch()
    agg = {"dapo": "token-mean", "dr_grpo": "seq-mean-token-sum-norm"}.get(
        core, "seq-mean-token-mean"
    )
    cfg = actor_config(f"crlvr_{core}", low=0.1, high=0.3, agg=agg, info=GLOBAL)
    loss, metrics = call(f"crlvr_{core}", logp, old, adv_row.unsqueeze(1) * mask, mask, cfg)
    # The same tensors straight into the core, with verl's global info mapped by hand:
    # num_rows = 8 / 2, num_tokens = 30 / 2.
    options = {"clip_low": 0.1, "clip_high": 0.3, "num_rows": 4.0}
    if core in ("grpo", "dapo", "dr_grpo"):
        options.update(agg=agg, num_tokens=15.0)
    adv = adv_row if core in ("gspo", "gmpo") else adv_row.unsqueeze(1) * mask
    want, want_metrics = policy_loss(core, logp, old, adv, mask, **options)
    assert torch.allclose(loss, want, atol=1e-6)
    assert torch.allclose(grad(loss, logp), grad(want, logp), atol=1e-6)
    assert metrics["crlvr/clip/frac"] == pytest.approx(float(want_metrics["clip/frac"]))


def test_token_mean_normaliser_from_global_batch_info_by_hand():
    # Equal log-probs: ratio 1, per-token term -A. Row 0 has A=1 on 2 tokens, row 1 has
    # A=-1 on 1 token: token sum = -2 + 1 = -1. Global 10 tokens on 2 ranks: -1 / (10/2).
    logp = torch.zeros(2, 2, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]]) * mask
    info = {"dp_size": 2, "batch_num_tokens": 10, "global_batch_size": None}
    cfg = actor_config("crlvr_dapo", agg="token-mean", info=info)
    loss, _ = call("crlvr_dapo", logp, torch.zeros(2, 2), adv, mask, cfg)
    assert float(loss.detach()) == pytest.approx(-0.2)


@pytest.mark.parametrize(
    ("ours", "low", "high", "agg"),
    [
        ("crlvr_grpo", 0.2, 0.2, "seq-mean-token-mean"),
        ("crlvr_dapo", 0.2, 0.28, "token-mean"),
        ("crlvr_dr_grpo", 0.2, 0.2, "seq-mean-token-sum-norm"),
    ],
)
@pytest.mark.parametrize("info", [None, GLOBAL], ids=["local", "global"])
def test_verl_vanilla_agrees_with_our_clipped_losses(ours, low, high, agg, info):
    # Both sides get the same clip range and aggregation; verl's dual clip (ratio > 3,
    # A < 0) never acts on these ratios, so the definitions coincide.
    logp, old, adv_row, mask = batch(seed=1)
    adv = adv_row.unsqueeze(1) * mask
    cfg = actor_config(ours, low=low, high=high, agg=agg, info=info)
    theirs, _ = call("vanilla", logp, old, adv, mask, cfg)
    mine, metrics = call(ours, logp, old, adv, mask, cfg)
    assert metrics["crlvr/clip/frac"] > 0  # the clip acts on this batch
    assert torch.allclose(mine, theirs, atol=1e-6)
    assert torch.allclose(grad(mine, logp), grad(theirs, logp), atol=1e-6)


@pytest.mark.parametrize("ours", ["crlvr_gspo", "crlvr_gspo_token"])
def test_verl_gspo_agrees_with_our_gspo(ours):
    # verl's gspo is the token form with a per-row constant advantage; with
    # seq-mean-token-mean it equals the sequence form in value and gradient (GSPO Eq. 13-14).
    logp, old, adv_row, mask = batch(seed=2)
    logp = (old + (logp.detach() - old) * 0.002).requires_grad_(True)  # ratios near the clip
    adv = adv_row.unsqueeze(1) * mask
    cfg = actor_config(ours, low=3e-4, high=4e-4, agg="seq-mean-token-mean", info=GLOBAL)
    theirs, _ = call("gspo", logp, old, adv, mask, cfg)
    mine, metrics = call(ours, logp, old, adv, mask, cfg)
    assert metrics["crlvr/clip/frac"] > 0  # the clip acts on this batch
    assert torch.allclose(mine, theirs, atol=1e-6)
    assert torch.allclose(grad(mine, logp), grad(theirs, logp), atol=1e-6)


def test_verl_geo_mean_agrees_with_our_gmpo():
    # verl's geo_mean averages over local rows and takes no global info; its 1e-8 in the
    # token-count denominators is within the tolerance.
    logp, old, adv_row, mask = batch(seed=3)
    # |log ratio| up to 1.0: past GMPO's e^+-0.4 clip on both sides, below verl's ratio 3
    logp = (old + (logp.detach() - old) * 2.5).requires_grad_(True)
    adv = adv_row.unsqueeze(1) * mask
    cfg = actor_config("crlvr_gmpo", low=0.4, high=0.4)
    theirs, _ = call("geo_mean", logp, old, adv, mask, cfg)
    mine, metrics = call("crlvr_gmpo", logp, old, adv, mask, cfg)
    assert 0 < metrics["crlvr/clip/low_frac"] and 0 < metrics["crlvr/clip/high_frac"]
    assert torch.allclose(mine, theirs, atol=1e-6)
    assert torch.allclose(grad(mine, logp), grad(theirs, logp), atol=1e-6)


def test_conspo_loss_by_hand_and_with_global_normaliser():
    # One group of 2: positive score s+ = -1, negative s- = -2 (token means), margin 0.01,
    # tau 10. J = tau * log(e^a / (e^a + e^b)), a = (s+ - m)/tau = -0.101, b = s-/tau = -0.2,
    # so J = -10 * log(1 + e^(b - a)) = -10 * log(1 + e^-0.099); the loss is -J.
    logp = torch.tensor([[-1.0, -1.0, 7.0], [-2.0, 7.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    targets = torch.tensor([[1.01], [-1.0]]) * mask  # from a crlvr_conspo estimator
    expected = 10 * math.log(1 + math.exp(-0.099))
    cfg = actor_config("crlvr_conspo", rollout_n=2, conspo_tau=10.0)
    loss, metrics = call("crlvr_conspo", logp, torch.zeros_like(logp), targets, mask, cfg)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert metrics["crlvr/conspo/margin"] == pytest.approx(0.01, abs=1e-6)
    # Global mini-batch of 4 rows on 1 rank = 2 groups; this micro-batch holds 1 usable
    # group, so its share of the mini-batch mean is half.
    cfg = actor_config("crlvr_conspo", rollout_n=2, info={"dp_size": 1, "global_batch_size": 4})
    loss, _ = call("crlvr_conspo", logp, torch.zeros_like(logp), targets, mask, cfg)
    assert float(loss.detach()) == pytest.approx(expected / 2, rel=1e-5)


def test_losses_refuse_what_they_cannot_honour():
    logp, old, adv_row, mask = batch()
    cfg = actor_config("crlvr_grpo")
    fn = core_algos.get_policy_loss_fn("crlvr_grpo")
    with pytest.raises(ValueError, match="rollout-correction"):
        fn(old, logp, adv_row.unsqueeze(1) * mask, mask, "token-mean", cfg, torch.ones_like(old))
    plain = ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=2)
    with pytest.raises(ValueError, match="CrlvrPolicyLossConfig"):
        call("crlvr_conspo", logp, old, torch.ones_like(old), mask, plain)
    with pytest.raises(ValueError, match="crlvr_conspo"):  # GRPO advantages are not targets
        call("crlvr_conspo", logp, old, adv_row.unsqueeze(1) * mask, mask, cfg)


# ----------------------------------------------------------------------------- estimators


def estimator(name, **kwargs):
    return core_algos.get_adv_estimator_fn(name)(**kwargs)


def test_grpo_estimators_by_hand_and_against_the_core():
    # Interleaved groups: u1 = rows 0, 2 (R 1, 0), u2 = rows 1, 3 (R 0.5, 0.5).
    # u1: mean 0.5, Bessel std 0.70711 -> A = +-0.70711; Dr.GRPO +-0.5; u2: 0.
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    scores = torch.tensor([[0.0, 1.0], [0.5, 0.0], [0.0, 0.0], [0.0, 0.5]])
    index = ["u1", "u2", "u1", "u2"]
    adv, ret = estimator("crlvr_grpo", token_level_rewards=scores, response_mask=mask, index=index)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert torch.allclose(adv[:, 0], torch.tensor([a, 0.0, -a, 0.0]), atol=1e-6)
    assert torch.equal(adv, ret) and adv[1, 1] == 0  # zero on padding
    adv, _ = estimator("crlvr_dr_grpo", token_level_rewards=scores, response_mask=mask, index=index)
    assert torch.allclose(adv[:, 0], torch.tensor([0.5, 0.0, -0.5, 0.0]))
    # contiguous layout: the core function on the same rewards
    rewards = torch.tensor([1.0, 0.0, 0.3, 0.9, 0.2, 0.2])
    contiguous = ["a", "a", "a", "b", "b", "b"]
    adv, _ = estimator(
        "crlvr_grpo",
        token_level_rewards=rewards.unsqueeze(1),
        response_mask=torch.ones(6, 1),
        index=contiguous,
    )
    assert torch.allclose(adv[:, 0], group_advantages(rewards, 3), atol=1e-6)


@pytest.mark.parametrize(("ours", "norm"), [("crlvr_grpo", True), ("crlvr_dr_grpo", False)])
def test_verl_grpo_estimator_agrees_with_ours(ours, norm):
    g = torch.Generator().manual_seed(4)
    rewards = (torch.rand(12, generator=g) > 0.5).float()
    rewards[8:12] = 1.0  # one all-equal group: 0 on both sides
    index = [f"q{i % 3}" for i in range(12)]  # interleaved groups of 4
    mask = (torch.rand(12, 6, generator=g) > 0.2).float()
    mask[:, 0] = 1
    scores = torch.zeros(12, 6)
    scores[:, -1] = rewards
    import numpy as np

    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=scores,
        response_mask=mask,
        index=np.array(index, dtype=object),
        norm_adv_by_std_in_grpo=norm,
    )
    mine, _ = estimator(ours, token_level_rewards=scores, response_mask=mask, index=index)
    assert torch.allclose(mine, theirs, atol=1e-6)


def test_rcc_estimators_by_hand_and_against_the_core():
    # One group, R = (1, 0), delta = mean_t(old - ref) = (0.2, -0.2).
    # Cov = ((0.5)(0.2) + (-0.5)(-0.2)) / 2 = 0.1; b* = 0.5 + 2 * 0.1 = 0.7.
    # A = (R - 0.7) / 0.70711 = (0.42426, -0.98995); Dr.GRPO + RCC: (0.3, -0.7).
    mask = torch.ones(2, 2)
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    ref = old - torch.tensor([[0.2], [-0.2]])
    kw = dict(token_level_rewards=scores, response_mask=mask, index=["g", "g"])
    adv, _ = estimator("crlvr_rcc", old_log_probs=old, ref_log_prob=ref, **kw)
    s = math.sqrt(0.5) + 1e-6
    assert torch.allclose(adv[:, 0], torch.tensor([0.3 / s, -0.7 / s]), atol=1e-5)
    adv, _ = estimator("crlvr_dr_grpo_rcc", old_log_probs=old, ref_log_prob=ref, **kw)
    assert torch.allclose(adv[:, 0], torch.tensor([0.3, -0.7]), atol=1e-6)
    # the core on the same tensors, random case
    g = torch.Generator().manual_seed(5)
    old = -torch.rand(6, 3, generator=g)
    ref = old - torch.rand(6, 3, generator=g) * 0.3
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    adv, _ = estimator(
        "crlvr_rcc",
        token_level_rewards=rewards.unsqueeze(1).expand(6, 3) / 3,
        response_mask=torch.ones(6, 3),
        index=["a"] * 3 + ["b"] * 3,
        old_log_probs=old,
        ref_log_prob=ref,
        rcc_coef=1.5,
    )
    delta = sequence_delta(old, ref, torch.ones(6, 3))
    assert torch.allclose(adv[:, 0], rcc_advantages(rewards, delta, 3, coef=1.5), atol=1e-5)


def test_conspo_estimators_by_hand():
    # Progress 0.15 with warmup 0.3: r = 0.5, m = (0.01 / 2)(1 - cos(pi / 2)) = 0.005.
    # R = (1, 0.6, 0): threshold 0.5 -> positives rows 0, 1. With RCC, delta = (0, 1, 0),
    # coef 10: mean R = 0.5333, Cov = ((0.4667)(-1/3) + (0.0667)(2/3) + (-0.5333)(-1/3)) / 3
    # = 0.02222, b* = 0.5333 + 0.2222 = 0.7556 -> only row 0 is positive.
    mask = torch.ones(3, 1)
    scores = torch.tensor([[1.0], [0.6], [0.0]])
    kw = dict(token_level_rewards=scores, response_mask=mask, index=["g"] * 3, progress=0.15)
    adv, _ = estimator("crlvr_conspo", **kw)
    assert torch.allclose(adv[:, 0], torch.tensor([1.005, 1.005, -1.0]), atol=1e-6)
    old = torch.zeros(3, 1)
    ref = -torch.tensor([[0.0], [1.0], [0.0]])
    adv, _ = estimator("crlvr_conspo_rcc", old_log_probs=old, ref_log_prob=ref, rcc_coef=10.0, **kw)
    assert torch.allclose(adv[:, 0], torch.tensor([1.005, -1.0, -1.0]), atol=1e-6)


def test_estimators_needing_the_trainer_say_so_through_verls_call():
    kw = dict(token_level_rewards=torch.ones(2, 1), response_mask=torch.ones(2, 1), index=["g"] * 2)
    with pytest.raises(ValueError, match="crlvr_sync"):
        estimator("crlvr_rcc", **kw)
    with pytest.raises(ValueError, match="crlvr_sync"):
        estimator("crlvr_conspo", **kw)
