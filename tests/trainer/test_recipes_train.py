"""Every recipe x {plain, bicc, rcc, bicc+rcc} trains for a few steps on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.algorithms import RECIPES

ARMS = {
    "plain": {},
    "bicc": {"bicc": True},
    "rcc": {"rcc": True},
    "bicc+rcc": {"bicc": True, "rcc": True},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_arm_trains(model_dir, tmp_path, recipe, arm):
    # A random model rarely stops, so DAPO's overlong penalty (-1 at the length cap) would
    # leave no completion above the correctness threshold and BiCC nothing to condition
    # on; the penalty has its own tests (test_dapo_in_trainer.py).
    config = make_config(tmp_path, recipe=recipe, overlong_punishment=False, **ARMS[arm])
    trainer = make_trainer(model_dir, config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == config.max_steps
    assert all(math.isfinite(x) for x in losses)
    changed = sum(
        not torch.equal(b, p.detach())
        for b, p in zip(before, trainer.model.parameters(), strict=True)
    )
    assert changed > 0, "no parameter moved"
    assert trainer.nonfinite_losses == 0
    logs = [h for h in trainer.state.log_history if "reward" in h]
    if "bicc" in arm:
        # Mixed groups get a context; the metric is logged every step.
        assert all("bicc/context_tokens" in h for h in logs)
        assert any(h["bicc/context_tokens"] > 0 for h in logs)
    assert all("rcc/cov" in h and "adv/collapse_rate" in h for h in logs)


def test_conspo_with_the_embedded_bicc_mix_trains(model_dir, tmp_path):
    # The embedded default's bicc_mix 0.5 with ConSPO: half the loss on plain prompts.
    config = make_config(tmp_path, recipe="conspo", bicc=True, bicc_mix=0.5)
    trainer = make_trainer(model_dir, config)
    assert type(trainer.loss).__name__ == "MixedLoss"
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == config.max_steps and all(math.isfinite(x) for x in losses)
    assert trainer.nonfinite_losses == 0
