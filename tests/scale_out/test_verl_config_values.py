"""verl's config values, read through OmegaConf without a schema, checked as the TRL path
checks them: a quoted "false" for a boolean (true in Python), a string where a number
belongs, and an unknown ``crlvr_*`` loss are refused in one line naming the setting.

Needs verl (the Makefile's .venv-verl); skipped where verl is not installed."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.utils.config import omega_conf_to_dataclass

from contrastive_rlvr.integrations.verl.settings import check_loss_mode, crlvr_options

TARGET = "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"


def _build(**fields):
    return omega_conf_to_dataclass(OmegaConf.create({"_target_": TARGET, **fields}))


@pytest.mark.parametrize("value", ["false", "off", "0", "no"])
def test_a_quoted_boolean_is_refused_naming_the_field(value):
    with pytest.raises(Exception, match=r"policy_loss.bicc='.*' is a str, not a bool"):
        _build(bicc=value)


def test_a_string_where_a_number_belongs_is_refused_in_one_line():
    with pytest.raises(Exception, match=r"policy_loss.rcc_coef='0.5' is a str, not a float"):
        _build(rcc_coef="0.5")
    # the start checks read the section before Hydra builds it: one line, no wrapping
    section = {"_target_": TARGET, "loss_mode": "crlvr_grpo", "rcc_coef": "0.5"}
    config = OmegaConf.create({"actor_rollout_ref": {"actor": {"policy_loss": section}}})
    with pytest.raises(ValueError, match=r"^actor_rollout_ref.actor.policy_loss.rcc_coef=") as info:
        crlvr_options(config)
    assert "\n" not in str(info.value)


def test_real_values_pass():
    cfg = _build(bicc=True, rcc_coef=1, conspo_tau=5.0)
    assert cfg.bicc is True and cfg.rcc_coef == 1


def test_an_unknown_crlvr_loss_is_refused_naming_the_closest():
    closest = r"loss_mode='crlvr_grop' is not a registered loss \(did you mean crlvr_grpo\?\)"
    with pytest.raises(ValueError, match=closest):
        check_loss_mode("crlvr_grop")
    check_loss_mode("crlvr_grpo")
    check_loss_mode("vanilla")  # verl's own: verl checks it
    assert "crlvr_grpo" in core_algos.POLICY_LOSS_REGISTRY


def test_importing_the_settings_before_verl_registers_the_trainer_without_a_cycle():
    import os
    import subprocess
    import sys

    code = (
        "import contrastive_rlvr.integrations.verl.settings\n"
        "from verl.trainer.ppo.v1.trainer_base import get_trainer_cls\n"
        "print(get_trainer_cls('crlvr_sync').__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "CrlvrTrainer"
    assert "circular import" not in done.stderr and "not registered" not in done.stderr
