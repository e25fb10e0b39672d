"""BiCC's distill form and transfer probe on verl: the actor loss equals the TRL path's.

tests/fixtures/distill_parity.json holds a fixed batch (student, old and teacher log-probs,
rows taught, advantages) and the TRL path's ``DistillLoss`` around its GRPO loss on it
(tests/fixtures/make_distill_parity.py, in .venv; tests/trainer/test_cross_engine_fixture.py
checks the file is still what TRL gives). Here the same batch goes through verl's actor
loss as verl's engine calls it (:class:`CrlvrActorLoss`, from the shipped GRPO recipe's
actor config, verl's ``ppo_loss`` inside): equal loss and equal gradient. The driver's
teacher step and the probe's rule are checked on hand-made batches. Needs verl
(.venv-verl).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl_runs import compose_recipe

from contrastive_rlvr.algorithms.bicc_transfer import probe_due
from contrastive_rlvr.integrations.verl.bicc_hooks import VERL_ADVICE, probe_value
from contrastive_rlvr.integrations.verl.distill import (
    TAUGHT,
    TEACHER,
    CrlvrActorLoss,
    plain_surrogate_loss,
)
from contrastive_rlvr.integrations.verl.settings import check_settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "distill_parity.json").read_text())
INPUTS = FIXTURE["inputs"]
PROMPT = 2  # prompt tokens of every row
LOSS = "actor_rollout_ref.actor.policy_loss."


def actor_config(**fields):
    """The shipped GRPO + BiCC recipe's actor config as the worker builds it, with the
    distill form and the fixture's case; the KL term off (the TRL side has beta 0)."""
    cfg = compose_recipe("grpo_bicc_rcc")
    values = {
        LOSS + "bicc_form": "distill",
        LOSS + "bicc_ratio_mode": None,
        "actor_rollout_ref.actor.use_kl_loss": False,
        **{LOSS + k: v for k, v in fields.items()},
    }
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    return cfg, omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def nested(rows: list[list[float]], lengths: list[int], dtype=torch.float64) -> torch.Tensor:
    return torch.nested.as_nested_tensor(
        [torch.tensor(r[:n], dtype=dtype) for r, n in zip(rows, lengths, strict=True)],
        layout=torch.jagged,
    )


def micro_batch() -> tuple[TensorDict, dict, torch.Tensor]:
    """The fixture's batch as verl's engine hands a micro-batch to the loss: nested
    response-shaped fields, the model's log-probs over prompt + response (each position
    scoring the next token), the global batch info. Returns (data, model_output, the
    student leaf (B, T))."""
    lengths = [sum(m) for m in INPUTS["mask"]]
    rows = len(lengths)
    student = torch.tensor(INPUTS["student"], dtype=torch.float64, requires_grad=True)
    taught = [[float(t)] * 3 for t in INPUTS["taught"]]
    advantages = [[a] * 3 for a in INPUTS["advantages"]]
    data = TensorDict(
        {
            "prompts": nested([[7] * PROMPT] * rows, [PROMPT] * rows, torch.long),
            "responses": nested([[5, 5, 5]] * rows, lengths, torch.long),
            "response_mask": nested([[1, 1, 1]] * rows, lengths, torch.long),
            "old_log_probs": nested(INPUTS["old"], lengths),
            "advantages": nested(advantages, lengths),
            TEACHER: nested(INPUTS["teacher"], lengths),
            TAUGHT: nested(taught, lengths),
        },
        batch_size=rows,
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=sum(lengths), global_batch_size=rows)
    # log-prob of token t+1 sits at position t: the response's sit at P-1 .. P+R-2
    flat = [
        torch.cat([torch.zeros(PROMPT - 1, dtype=torch.float64), student[i, :n], torch.zeros(1)])
        for i, n in enumerate(lengths)
    ]
    return data, {"log_probs": torch.cat(flat)}, student


@pytest.mark.parametrize("name", sorted(FIXTURE["cases"]))
def test_the_verl_actor_loss_is_the_trl_distill_loss(name):
    case, want = FIXTURE["cases"][name], FIXTURE["expected"][name]
    _, config = actor_config(
        bicc_distill_weight=case["weight"],
        bicc_distill_is_clip=case["is_clip"],
        bicc_distill_max_gap=case["max_gap"],
        bicc_distill_center=case["center"],
    )
    data, output, student = micro_batch()
    loss, metrics = CrlvrActorLoss(config)(model_output=output, data=data)
    (grad,) = torch.autograd.grad(loss, student)
    assert float(loss.detach()) == pytest.approx(want["loss"], rel=1e-12, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor(want["grad"], dtype=torch.float64))
    assert float(metrics["bicc/distill_gap"].aggregate()) == pytest.approx(want["distill_gap"])


def test_the_third_rows_gradient_by_hand():
    # Row 2 (taught, one token, A = -0.5): student -1.5, old -1.4, teacher -1.0.
    # GRPO: ratio e^-0.1 inside [0.8, 1.2], d/dlogp = -A * ratio / (1 token x 4 rows);
    # distill: gap -0.5 x IS weight min(e^-0.1, 2), / 4 rows. Weight 0.3.
    _, config = actor_config(bicc_distill_weight=0.3, bicc_distill_is_clip=2.0)
    data, output, student = micro_batch()
    loss, _ = CrlvrActorLoss(config)(model_output=output, data=data)
    (grad,) = torch.autograd.grad(loss, student)
    ratio = math.exp(-0.1)
    want = 0.7 * (0.5 * ratio / 4) + 0.3 * (-0.5 * ratio / 4)
    assert float(grad[2, 0]) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.045241870901797966)  # the TRL path's number


def test_the_distill_term_scales_with_the_ranks_share():
    # Two ranks of a batch of 8: this rank holds 4 of the mini-batch's 4 per-rank rows, as
    # before; a global batch of 16 on 2 ranks gives it 4 of 8: the term halves.
    _, config = actor_config(bicc_distill_weight=1.0, bicc_distill_is_clip=None)
    data, output, _ = micro_batch()
    whole, _ = CrlvrActorLoss(config)(model_output=output, data=data)
    tu.assign_non_tensor(data, global_batch_size=16, dp_size=2)
    half, _ = CrlvrActorLoss(config)(model_output=output, data=data)
    assert float(half.detach()) == pytest.approx(float(whole.detach()) / 2, rel=1e-12)


def test_without_the_distill_form_the_loss_is_verls():
    from verl.workers.utils.losses import ppo_loss

    cfg, _ = actor_config()
    OmegaConf.update(cfg, LOSS + "bicc_form", "conditioned", merge=False)
    OmegaConf.update(cfg, LOSS + "bicc_ratio_mode", "paper", merge=False)
    config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    data, output, _ = micro_batch()
    ours, _ = CrlvrActorLoss(config)(model_output=output, data=data)
    theirs, _ = ppo_loss(config, output, data)
    assert float(ours.detach()) == float(theirs.detach())


def test_the_plain_surrogate_is_minus_the_mean_advantage_weighted_logp():
    data, output, _ = micro_batch()
    loss, _ = plain_surrogate_loss(model_output=output, data=data)
    s, m, a = INPUTS["student"], INPUTS["mask"], INPUTS["advantages"]
    rows = [
        sum(x * k for x, k in zip(r, mk, strict=True)) / sum(mk) for r, mk in zip(s, m, strict=True)
    ]
    want = -sum(ai * ri for ai, ri in zip(a, rows, strict=True)) / 4
    assert float(loss.detach()) == pytest.approx(want, rel=1e-12)


def test_the_distill_form_starts_on_verl():
    cfg, _ = actor_config()
    OmegaConf.update(cfg, "actor_rollout_ref.actor.use_kl_loss", True, merge=False)
    options = check_settings(cfg)
    assert options.bicc_form == "distill" and options.bicc_ratio_mode is None


def test_a_reference_teacher_needs_verls_reference_model():
    cfg, _ = actor_config(bicc_teacher="reference")
    # GRPO's estimator (RCC's would ask for the reference model first)
    OmegaConf.update(cfg, "algorithm.adv_estimator", "crlvr_grpo", merge=False)
    with pytest.raises(ValueError, match="bicc_teacher='reference' needs verl's reference"):
        check_settings(cfg)


def test_probed_steps_and_the_collected_value(caplog):
    # verl's global_steps 1, 2, ... are the TRL path's optimizer steps 0, 1, ...
    assert [probe_due(s - 1, 2) for s in range(1, 6)] == [True, False, True, False, True]
    assert not any(probe_due(s, 0) for s in range(5))
    assert probe_value({"metrics": {"bicc/transfer_cos": 0.25}}) == 0.25
    assert probe_value({"metrics": [{}, {"bicc/transfer_cos": -0.5}]}) == -0.5
    assert "policy_loss.bicc_form=distill" in VERL_ADVICE
    from contrastive_rlvr.algorithms.bicc_transfer import TransferWatch

    watch = TransferWatch(0.2, VERL_ADVICE)
    with caplog.at_level(logging.WARNING):
        for value in [0.1, float("nan"), 0.05, 0.0, 0.1]:
            watch.record(value)
    warned = [r for r in caplog.records if "not reaching the policy" in r.getMessage()]
    assert len(warned) == 1 and "policy_loss.bicc_form=distill" in warned[0].getMessage()


@pytest.mark.parametrize(
    "loss_mode",
    ["crlvr_grpo", "crlvr_dr_grpo", "crlvr_dapo", "crlvr_gmpo", "crlvr_gspo", "crlvr_conspo"],
)
def test_every_recipe_loss_takes_the_distill_term(loss_mode):
    """For each recipe's loss: verl's loss x (1 - w) + w x the distill term computed
    directly from the fixture's tensors, in value and in gradient."""
    from verl.workers.utils.losses import ppo_loss

    from contrastive_rlvr.algorithms.bicc_transfer import sampled_token_distill_loss

    cfg, _ = actor_config(bicc_distill_weight=0.25, bicc_distill_is_clip=2.0)
    OmegaConf.update(cfg, LOSS + "loss_mode", loss_mode, merge=False)
    OmegaConf.update(cfg, "actor_rollout_ref.actor.rollout_n", 4, merge=False, force_add=True)
    config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    data, output, student = micro_batch()
    if loss_mode == "crlvr_conspo":  # ConSPO's targets: 1 + m for positives, -c otherwise
        lengths = [sum(m) for m in INPUTS["mask"]]
        data["advantages"] = nested([[1.0] * 3, [-1.0] * 3, [-1.0] * 3, [1.0] * 3], lengths)
    ours, _ = CrlvrActorLoss(config)(model_output=output, data=data)
    base, _ = ppo_loss(config, output, data)
    mask = torch.tensor(INPUTS["mask"], dtype=torch.float64)
    term, _ = sampled_token_distill_loss(
        student * mask,
        torch.tensor(INPUTS["teacher"], dtype=torch.float64),
        mask,
        torch.tensor(INPUTS["taught"]),
        old_logp=torch.tensor(INPUTS["old"], dtype=torch.float64),
        is_clip=2.0,
    )
    want = 0.75 * base + 0.25 * term
    assert float(ours.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    (g_ours,) = torch.autograd.grad(ours, student)
    (g_want,) = torch.autograd.grad(want, student)
    torch.testing.assert_close(g_ours, g_want)
    assert float(term.detach()) != 0.0
