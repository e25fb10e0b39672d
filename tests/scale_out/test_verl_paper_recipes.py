"""recipes/paper/verl/: every paper recipe against verl's own schema (needs verl: the
Makefile's .venv-verl): it composes, passes verl's validate_config, builds our policy
loss config, selects the crlvr_sync trainer, and passes its start-up checks."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.trainer import check_settings

PAPER = Path(__file__).resolve().parents[2] / "recipes" / "paper" / "verl"
NAMES = sorted(p.stem for p in PAPER.glob("*.yaml"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_paper_recipe_passes_verls_schema_and_our_checks(name):
    with initialize_config_dir(config_dir=str(PAPER), version_base=None):
        cfg = compose(config_name=name)
    validate_config(
        cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
    )
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, CrlvrPolicyLossConfig)
    assert cfg.trainer.v1.trainer_mode == "crlvr_sync"
    options = check_settings(cfg)
    assert options.bicc is ("_bicc_" in name)
