"""verl's ``policy_loss.bicc_ratio_mode`` left unset takes the recipe's default from the one
table both engines read (``algorithms.bicc_defaults``): ``consistent`` for ConSPO,
``paper`` for the clipped recipes, as the TRL path's ``bicc_ratio_mode``.

Needs verl (the Makefile's .venv-verl, which has no TRL: importing the table here shows
it needs none); skipped where verl is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf
from verl.utils.config import omega_conf_to_dataclass

from contrastive_rlvr.algorithms.bicc_defaults import RECIPE_BICC_RATIO_MODE
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig

TARGET = "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
# docs/bicc.md "Ratio mode per recipe", written out by hand, by verl loss name; verl's own
# losses and GSPO's token form are no table row and take the unlisted default, paper.
EXPECTED = {
    "crlvr_grpo": "paper",
    "crlvr_dr_grpo": "paper",
    "crlvr_dapo": "paper",
    "crlvr_gmpo": "paper",
    "crlvr_gspo": "paper",
    "crlvr_gspo_token": "paper",
    "crlvr_conspo": "consistent",
    "vanilla": "paper",
}


@pytest.mark.parametrize("loss_mode", sorted(EXPECTED))
def test_unset_ratio_takes_the_recipes_default(loss_mode):
    assert CrlvrPolicyLossConfig(loss_mode=loss_mode).bicc_ratio_mode == EXPECTED[loss_mode]
    # as Hydra builds it from a verl YAML without the field
    built = omega_conf_to_dataclass(OmegaConf.create({"_target_": TARGET, "loss_mode": loss_mode}))
    assert built.bicc_ratio_mode == EXPECTED[loss_mode]


def test_every_table_row_reaches_verl():
    for recipe, mode in RECIPE_BICC_RATIO_MODE.items():
        assert CrlvrPolicyLossConfig(loss_mode=f"crlvr_{recipe}").bicc_ratio_mode == mode


@pytest.mark.parametrize("mode", ["paper", "consistent"])
def test_a_ratio_the_user_sets_wins(mode):
    for loss_mode in ("crlvr_conspo", "crlvr_grpo"):
        assert (
            CrlvrPolicyLossConfig(loss_mode=loss_mode, bicc_ratio_mode=mode).bicc_ratio_mode == mode
        )


def test_the_distill_form_keeps_its_ratio_mode_unset_on_verl():
    # The distill form's loss reads the plain prompt: no ratio mode is resolved for it
    # (the recipe's default would make the trainer recompute old log-probs it never reads).
    cfg = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True, bicc_form="distill")
    assert cfg.bicc_ratio_mode is None
    conditioned = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True, bicc_form="conditioned")
    assert conditioned.bicc_ratio_mode == "paper"
    # Unset, the form is the default, distill; a ratio mode set asks for the paper's form.
    default = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True)
    assert (default.bicc_form, default.bicc_ratio_mode) == ("distill", None)
    asked = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True, bicc_ratio_mode="consistent")
    assert (asked.bicc_form, asked.bicc_ratio_mode) == ("conditioned", "consistent")


def test_a_ratio_mode_with_the_distill_form_is_refused_in_one_line():
    with pytest.raises(ValueError, match="bicc_ratio_mode") as err:
        CrlvrPolicyLossConfig(
            loss_mode="crlvr_grpo", bicc=True, bicc_form="distill", bicc_ratio_mode="paper"
        )
    assert "\n" not in str(err.value)
