"""The recipe and policy-loss registries: every recipe with its paper defaults,
recipe_advantages with and without RCC, duplicates and unknown names."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import pytest
import torch

from contrastive_rlvr.algorithms import (
    POLICY_LOSSES,
    RECIPES,
    ClipOptions,
    Recipe,
    get_policy_loss,
    get_recipe,
    loss_option_names,
    policy_loss,
    recipe_advantages,
    register_policy_loss,
    register_recipe,
)

torch.set_num_threads(1)

# name -> (objective, loss, scale_by_std, beta): docs/algorithms.md "Policy losses" and the
# BiCC paper's hyperparameters (GRPO beta 0.04; Dr.GRPO 0.01 with the frozen reference;
# DAPO / GSPO / GMPO / ConSPO no KL; Dr.GRPO without std scaling).
RECIPE_TABLE = {
    "grpo": ("policy", "grpo", True, 0.04),
    "dr_grpo": ("policy", "dr_grpo", False, 0.01),
    "dapo": ("policy", "dapo", True, 0.0),
    "gmpo": ("policy", "gmpo", True, 0.0),
    "gspo": ("policy", "gspo", True, 0.0),
    "conspo": ("contrastive", None, True, 0.0),
}

# loss -> paper defaults: GRPO clip 0.2/0.2 seq-mean-token-mean; DAPO clip-higher 0.2/0.28
# token-mean; Dr.GRPO 0.2/0.2 token-sum over a constant; GSPO 3e-4/4e-4 (v2); GMPO e^+-0.4.
LOSS_DEFAULTS = {
    "grpo": dict(clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    "dapo": dict(clip_low=0.2, clip_high=0.28, agg="token-mean"),
    "dr_grpo": dict(clip_low=0.2, clip_high=0.2, agg="seq-mean-token-sum-norm"),
    "gspo": dict(clip_low=3e-4, clip_high=4e-4),
    "gspo_token": dict(clip_low=3e-4, clip_high=4e-4),
    "gmpo": dict(clip_low=0.4, clip_high=0.4),
}


@pytest.mark.parametrize("name", sorted(RECIPE_TABLE))
def test_every_recipe_with_its_paper_defaults(name):
    recipe = get_recipe(name)
    assert recipe.name == name
    assert (recipe.objective, recipe.loss, recipe.scale_by_std, recipe.beta) == RECIPE_TABLE[name]
    assert recipe.paper and recipe.summary
    # DAPO's batch and reward extras belong to DAPO alone
    assert recipe.dynamic_sampling == recipe.overlong_punishment == (name == "dapo")


def test_recipe_table_is_complete():
    assert set(RECIPE_TABLE) <= set(RECIPES)


@pytest.mark.parametrize("name", sorted(LOSS_DEFAULTS))
def test_loss_defaults_match_the_papers_and_the_signatures(name):
    spec = get_policy_loss(name)
    assert spec.defaults == LOSS_DEFAULTS[name]
    # one signature: the four tensors and the options, whose class states the defaults
    assert list(inspect.signature(spec.fn).parameters) == [*TENSORS, "options"]
    assert spec.options(**spec.defaults).clip_high == LOSS_DEFAULTS[name]["clip_high"]
    assert spec.per_row_advantages_only == (name in ("gspo", "gmpo"))


TENSORS = ["logp", "old_logp", "advantages", "mask"]


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_every_loss_takes_one_options_object(name):
    spec = get_policy_loss(name)
    assert list(inspect.signature(spec.fn).parameters) == [*TENSORS, "options"]
    assert issubclass(spec.options, ClipOptions)
    assert loss_option_names(name) >= {"clip_low", "clip_high", "ref_logp", "beta", "num_rows"}
    # a token-level loss takes the aggregation too, a sequence-level one does not
    token = {"agg", "max_len", "num_tokens"}
    assert token <= loss_option_names(name) or not token & loss_option_names(name)


def test_recipe_advantages_without_delta():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    # GRPO: mean 0.25, Bessel std 0.5 -> (0.75, -0.25, -0.25, -0.25) / (0.5 + 1e-6)
    torch.testing.assert_close(
        recipe_advantages(get_recipe("grpo"), rewards, 4),
        torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6),
    )
    # Dr.GRPO: no std
    torch.testing.assert_close(
        recipe_advantages(get_recipe("dr_grpo"), rewards, 4),
        torch.tensor([0.75, -0.25, -0.25, -0.25]),
    )


def test_recipe_advantages_with_delta_is_rcc():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    delta = torch.tensor([0.3, 0.1, 0.2, 0.2])
    # b* = 0.5 + 2 * Cov = 0.5 + 2 * 0.025 = 0.55; Bessel std sqrt(1/3)
    std = math.sqrt(1 / 3) + 1e-6
    torch.testing.assert_close(
        recipe_advantages(get_recipe("gspo"), rewards, 4, delta=delta),
        torch.tensor([0.45, -0.55, 0.45, -0.55]) / std,
    )
    torch.testing.assert_close(
        recipe_advantages(get_recipe("dr_grpo"), rewards, 4, delta=delta),
        torch.tensor([0.45, -0.55, 0.45, -0.55]),
    )
    # coefficient 1: b* = 0.525
    torch.testing.assert_close(
        recipe_advantages(get_recipe("dr_grpo"), rewards, 4, delta=delta, rcc_coef=1.0),
        torch.tensor([0.475, -0.525, 0.475, -0.525]),
    )


def test_conspo_recipe_gives_the_rcc_cut_not_advantages():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    delta = torch.tensor([0.3, 0.1, 0.2, 0.2])
    torch.testing.assert_close(
        recipe_advantages(get_recipe("conspo"), rewards, 4, delta=delta),
        torch.full((4,), 0.55),
    )
    with pytest.raises(ValueError, match="'conspo' has no advantages"):
        recipe_advantages(get_recipe("conspo"), rewards, 4)


def test_duplicate_registration_raises_and_changes_nothing():
    before_recipes, before_losses = dict(RECIPES), dict(POLICY_LOSSES)
    with pytest.raises(ValueError, match="recipe 'grpo' is already registered"):
        register_recipe(Recipe("grpo", "policy", "dapo", False, 0.0, "x", "y"))
    with pytest.raises(ValueError, match="policy loss 'grpo' is already registered"):
        register_policy_loss("grpo")(lambda logp, old_logp, advantages, mask: (logp.sum(), {}))
    assert RECIPES == before_recipes and POLICY_LOSSES == before_losses


def test_recipe_with_unknown_loss_raises():
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'"):
        register_recipe(Recipe("my_ppo", "policy", "ppo", True, 0.0, "x", "y"))
    assert "my_ppo" not in RECIPES


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown recipe 'ppo'; valid: .*grpo.*dr_grpo.*conspo"):
        get_recipe("ppo")
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'; valid: .*gspo_token"):
        get_policy_loss("ppo")


@dataclass(frozen=True, kw_only=True)
class ScaleOptions(ClipOptions):
    scale: float = 1.0


def test_a_registered_loss_is_reachable_by_name():
    name = "test_only_linear"
    try:

        @register_policy_loss(name, scale=2.0)
        def linear(logp, old_logp, advantages, mask, options: ScaleOptions):
            loss = -(options.scale * advantages * (logp * mask).sum(1)).mean()
            return loss, {}

        logp = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
        mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
        adv = torch.tensor([1.0, -1.0])
        # the registered default scale=2 applies: -(2 * (1 * 3) + 2 * (-1 * 3)) / 2 = 0
        loss, _ = policy_loss(name, logp, logp, adv, mask)
        assert loss.item() == 0.0
        loss, _ = policy_loss(name, logp, logp, torch.tensor([1.0, 0.0]), mask, scale=1.0)
        assert loss.item() == -1.5  # -(1 * 3 + 0) / 2
        register_recipe(Recipe(name, "policy", name, True, 0.0, "test", "test"))
        assert get_recipe(name).loss == name
    finally:
        POLICY_LOSSES.pop(name, None)
        RECIPES.pop(name, None)
