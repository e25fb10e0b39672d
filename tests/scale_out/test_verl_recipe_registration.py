"""A recipe a user registers runs on verl with no other table to edit: after
``register_recipe`` (before or after ``import verl``), ``loss_mode: crlvr_<name>`` is a
verl policy loss computing the recipe's loss, takes the recipe's ``bicc_ratio_mode``
default, and passes the ``crlvr_sync`` start checks (a contrastive recipe pairs with the
ConSPO estimators). The TRL side of the same promise: tests/recipes/test_recipe_registration.py.
Needs verl (.venv-verl).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

from contrastive_rlvr.algorithms import RECIPES, policy_loss
from contrastive_rlvr.algorithms.registry import Recipe, register_recipe
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.losses import conspo_policy_loss, is_contrastive_loss
from contrastive_rlvr.integrations.verl.settings import check_settings

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_recipes():
    made = [
        register_recipe(
            Recipe(
                "my_dr_grpo",
                "policy",
                "dr_grpo",
                False,
                0.0,
                "a user's variant",
                "Dr.GRPO's loss, consistent BiCC ratio",
                bicc_ratio_mode="consistent",
            )
        ),
        register_recipe(
            Recipe(
                "my_conspo",
                "contrastive",
                None,
                True,
                0.0,
                "a user's variant",
                "ConSPO, paper BiCC ratio",
                bicc_ratio_mode="paper",
            )
        ),
    ]
    yield made
    for recipe in made:
        del RECIPES[recipe.name]
        core_algos.POLICY_LOSS_REGISTRY.pop("crlvr_" + recipe.name, None)


def composed(recipe: str, **dotted):
    with initialize_config_dir(config_dir=str(ROOT / "recipes" / "verl"), version_base=None):
        cfg = compose(config_name=recipe)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    for key, value in dotted.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def test_a_registered_recipe_is_a_verl_loss_computing_its_loss(user_recipes):
    fn = core_algos.get_policy_loss_fn("crlvr_my_dr_grpo")
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=g)
    logp = old + (torch.rand(4, 5, generator=g) - 0.5) * 0.4
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(-1).expand(4, 5)
    mask = torch.ones(4, 5)
    mask[1, 3:] = 0
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=2,
        ppo_micro_batch_size_per_gpu=2,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode="seq-mean-token-sum-norm",
        policy_loss=CrlvrPolicyLossConfig(loss_mode="crlvr_my_dr_grpo"),
    )
    loss, _ = fn(old, logp, adv, mask, "seq-mean-token-sum-norm", config)
    # the core's dr_grpo loss (the recipe's loss) with verl's clip range and aggregation
    expected, _ = policy_loss(
        "dr_grpo", logp, old, adv, mask, clip_low=0.2, clip_high=0.28, agg="seq-mean-token-sum-norm"
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-7)
    assert core_algos.get_policy_loss_fn("crlvr_my_conspo") is conspo_policy_loss
    assert is_contrastive_loss("crlvr_my_conspo") and not is_contrastive_loss("crlvr_my_dr_grpo")


def test_a_registered_recipe_takes_its_own_ratio_mode_default(user_recipes):
    assert CrlvrPolicyLossConfig(loss_mode="crlvr_my_dr_grpo").bicc_ratio_mode == "consistent"
    assert CrlvrPolicyLossConfig(loss_mode="crlvr_my_conspo").bicc_ratio_mode == "paper"


def test_a_registered_recipe_passes_the_start_checks(user_recipes):
    pl = "actor_rollout_ref.actor.policy_loss."
    options = check_settings(composed("grpo_bicc_rcc", **{pl + "loss_mode": "crlvr_my_dr_grpo"}))
    assert options.loss_mode == "crlvr_my_dr_grpo"
    options = check_settings(composed("conspo_rcc", **{pl + "loss_mode": "crlvr_my_conspo"}))
    assert options.loss_mode == "crlvr_my_conspo"
    # a contrastive recipe's loss needs a ConSPO estimator, as crlvr_conspo does
    with pytest.raises(ValueError, match="do not pair"):
        check_settings(composed("grpo_bicc_rcc", **{pl + "loss_mode": "crlvr_my_conspo"}))


def test_an_unregistered_recipe_is_no_loss():
    with pytest.raises(ValueError, match="Unsupported loss mode"):
        core_algos.get_policy_loss_fn("crlvr_not_a_recipe")
