"""Which recipes and switches the token-level methods combine with, and the loss they pick."""

from __future__ import annotations

import pytest

from contrastive_rlvr.algorithms import (
    RECIPES,
    TOKEN_METHOD_RECIPES,
    check_token_method_compat,
    token_method_loss,
)


def test_every_listed_recipe_exists():
    for recipes in TOKEN_METHOD_RECIPES.values():
        assert set(recipes) <= set(RECIPES)


@pytest.mark.parametrize(
    "recipe, switches",
    [
        ("grpo", dict(verigate=True, reco=True, bicc=True, rcc=True)),
        ("dr_grpo", dict(verigate=True, oc_grpo=True, rcc=True)),
        ("gspo", dict(verigate=True, bicc=True)),
        ("dapo", dict(verigate=True, dynamic_sampling=False)),
        ("dapo", dict(reco=True, bicc=True)),
        ("conspo", dict(bicc=True, rcc=True)),
    ],
)
def test_compatible_combinations_pass(recipe, switches):
    check_token_method_compat(recipe, **switches)


@pytest.mark.parametrize(
    "recipe, switches, message",
    [
        ("gmpo", dict(verigate=True), "verigate=True does not work with recipe 'gmpo'"),
        ("conspo", dict(reco=True), "reco=True does not work with recipe 'conspo'"),
        ("gspo", dict(oc_grpo=True), "oc_grpo=True does not work with recipe 'gspo'"),
        ("grpo", dict(reco=True, oc_grpo=True), "oc_grpo=True and reco=True cannot be combined"),
        ("grpo", dict(bicc=True, oc_grpo=True), "bicc=True and oc_grpo=True cannot be combined"),
        ("dapo", dict(verigate=True), "dynamic sampling"),
        ("grpo", dict(verigate=True, dynamic_sampling=True), "gate never opens"),
        ("nope", dict(), "unknown recipe 'nope'"),
    ],
)
def test_incompatible_combinations_raise_naming_the_conflict(recipe, switches, message):
    with pytest.raises(ValueError, match=message):
        check_token_method_compat(recipe, **switches)


def test_token_method_loss_inherits_the_recipe_options():
    assert token_method_loss("dapo", reco=True) == (
        "reco",
        {"clip_low": 0.2, "clip_high": 0.28, "agg": "token-mean"},
    )
    assert token_method_loss("dr_grpo", oc_grpo=True) == (
        "oc_grpo",
        {"clip_low": 0.2, "clip_high": 0.2, "agg": "seq-mean-token-sum-norm"},
    )
    assert token_method_loss("gspo", verigate=True) == ("gspo_token", {})
    assert token_method_loss("grpo", verigate=True) == ("grpo", {})
    assert token_method_loss("gmpo") == ("gmpo", {})
