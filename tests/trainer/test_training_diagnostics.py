"""Training diagnostics: the gradient-variance estimator and the ratio margin on hand-made
cases, and the callback inside a real (tiny) training run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.algorithms.diagnostics import (
    group_gradient_variance,
    projected_gradients,
    random_directions,
    ratio_margin,
)
from contrastive_rlvr.trainer.training_diagnostics import DELTAS_FILE, TrainingDiagnostics


def test_projected_gradients_of_a_linear_scorer():
    # s_i = w . x_i, so grad_w s_i = x_i and u[i, k] = v_k . x_i
    w = torch.nn.Parameter(torch.tensor([0.3, -0.7]))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    scores = [w @ xi for xi in x]
    directions = [[torch.tensor([1.0, 0.0])], [torch.tensor([0.6, 0.8])]]
    u = projected_gradients(scores, [w], directions)
    # v1 . x_i = 1, 0, 1, 2; v2 . x_i = 0.6, 0.8, 0.6 + 0.8 = 1.4, 1.2
    expected = torch.tensor([[1.0, 0.6], [0.0, 0.8], [1.0, 1.4], [2.0, 1.2]])
    torch.testing.assert_close(u, expected)
    assert w.grad is None  # the training gradient is left alone


def test_group_gradient_variance_by_hand():
    u = torch.tensor([[1.0, 0.6], [0.0, 0.8], [1.0, 1.4], [2.0, 1.2]])
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])  # groups {0, 1} and {2, 3}
    # group 0: 1*[1, 0.6] - 1*[0, 0.8] = [1, -0.2]; group 1: 0.5*[1, 1.4] - 0.5*[2, 1.2]
    # = [-0.5, 0.1]. Unbiased variance over the 2 groups: direction 1: mean 0.25,
    # (0.75^2 + 0.75^2) / 1 = 1.125; direction 2: mean -0.05, (0.15^2 + 0.15^2) / 1 = 0.045.
    # Mean over directions: (1.125 + 0.045) / 2 = 0.585
    var = group_gradient_variance(advantages, u, group_size=2)
    assert var.item() == pytest.approx(0.585)
    # two groups with the same contribution ([1, -1] in both directions): variance 0
    same = torch.tensor([1.0, -1.0, 1.0, -1.0])
    u_same = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert group_gradient_variance(same, u_same, 2).item() == 0.0


def test_group_gradient_variance_rejects_bad_layout():
    with pytest.raises(ValueError, match="at least 2 whole groups"):
        group_gradient_variance(torch.zeros(3), torch.zeros(3, 1), 2)
    with pytest.raises(ValueError, match="rows"):
        group_gradient_variance(torch.zeros(4), torch.zeros(2, 1), 2)


def test_ratio_margin_by_hand():
    after = torch.tensor([[0.1, 0.3], [0.0, 5.0], [-0.2, -0.2], [0.0, 0.0]])
    before = torch.zeros(4, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])  # 5.0 is masked
    correct = torch.tensor([True, True, False, False])
    margin, pos, neg = ratio_margin(after, before, mask, correct)
    # correct: exp(0.2) = 1.2214028, exp(0) = 1 -> 1.1107014; wrong: exp(-0.2) = 0.8187308,
    # exp(0) = 1 -> 0.9093654; margin 0.2013360
    assert pos.item() == pytest.approx(1.1107014, abs=1e-6)
    assert neg.item() == pytest.approx(0.9093654, abs=1e-6)
    assert margin.item() == pytest.approx(0.2013360, abs=1e-6)
    assert ratio_margin(after, before, mask, torch.ones(4, dtype=torch.bool)) is None


def test_random_directions_unit_and_seeded():
    params = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(5))]
    a = random_directions(params, 2, seed=7)
    b = random_directions(params, 2, seed=7)
    c = random_directions(params, 2, seed=8)
    for direction in a:
        norm2 = sum((x * x).sum() for x in direction)
        assert norm2.item() == pytest.approx(1.0, abs=1e-6)
        assert [x.shape for x in direction] == [p.shape for p in params]
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    assert not torch.equal(a[0][0], c[0][0])


# ---------------------------------------------------------------------- inside training


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny-diag"))


def _train(model_dir, tmp_path, diagnostics: bool, **overrides):
    # RLVRTrainer attaches the diagnostics callback itself when a switch is on.
    every = 1 if diagnostics else 0
    config = make_config(
        tmp_path,
        max_steps=3,
        diagnostics_every=every,
        deltas_every=every,
        rcc=True,
        dataset="unused.jsonl",  # the trainer gets its prompts directly
        **overrides,
    )
    trainer = make_trainer(model_dir, config)
    attached = [c for c in trainer.callback_handler.callbacks if isinstance(c, TrainingDiagnostics)]
    assert len(attached) == (1 if diagnostics else 0)
    trainer.train()
    return trainer, config


def test_callback_logs_diagnostics_and_deltas(model_dir, tmp_path):
    trainer, config = _train(model_dir, tmp_path, True)
    logs = [h for h in trainer.state.log_history if "diag/grad_var_plain" in h]
    assert [h["step"] for h in logs] == [1, 2, 3]
    for h in logs:
        assert h["diag/grad_var_plain"] >= 0 and math.isfinite(h["diag/grad_var_rcc"])
    # step 1: the policy is the reference, delta = 0, so both baselines are the same
    assert logs[0]["diag/grad_var_rcc"] == pytest.approx(logs[0]["diag/grad_var_plain"], rel=1e-6)
    lines = [json.loads(x) for x in (tmp_path / "out" / DELTAS_FILE).read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3]
    batch = config.per_device_train_batch_size
    assert all(len(x["rewards"]) == len(x["delta"]) == batch for x in lines)
    assert lines[0]["delta"] == [0.0] * batch
    assert any(d != 0 for d in lines[-1]["delta"])


def test_rcc_coef_zero_gives_equal_variances(model_dir, tmp_path):
    # with c = 0 the RCC baseline is the group mean: the two estimates must coincide
    trainer, _ = _train(model_dir, tmp_path, True, rcc_coef=0.0)
    for h in trainer.state.log_history:
        if "diag/grad_var_plain" in h:
            assert h["diag/grad_var_rcc"] == pytest.approx(h["diag/grad_var_plain"], rel=1e-6)


@pytest.mark.parametrize("bicc", [False, True])
def test_diagnostics_do_not_change_training(model_dir, tmp_path, bicc):
    with_diag, _ = _train(model_dir, tmp_path / "a", True, bicc=bicc)
    without, _ = _train(model_dir, tmp_path / "b", False, bicc=bicc)
    for p, q in zip(with_diag.model.parameters(), without.model.parameters(), strict=True):
        assert torch.equal(p.detach(), q.detach())
