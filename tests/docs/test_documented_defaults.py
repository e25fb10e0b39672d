"""Every default and constant the docs state about the advantages, the KL weight and the
recipes' TRL fields, read from the docs and held against the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from contrastive_rlvr.algorithms.advantages import DEFAULT_EPS
from contrastive_rlvr.trainer import RLVRConfig

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = (ROOT / "docs" / "algorithms.md").read_text()
PARITY = (ROOT / "docs" / "trl-parity.md").read_text()


def default(name: str):
    (f,) = [f for f in dataclasses.fields(RLVRConfig) if f.name == name]
    return f.default


def one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, found)
    return found[0]


def test_adv_eps_as_the_docs_state_it():
    assert float(one(r"`eps = adv_eps = ([0-9.e-]+)`", ALGORITHMS)) == default("adv_eps")
    assert float(one(r"`adv_eps` ([0-9.e-]+) by default", PARITY)) == default("adv_eps")
    assert float(one(r"verl's own estimators use ([0-9.e-]+)\)", ALGORITHMS)) == DEFAULT_EPS


def test_the_default_beta_as_the_docs_state_it():
    from trl import GRPOConfig

    trl_beta = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "beta")
    assert float(one(r"The default is TRL's `beta = ([0-9.]+)`", ALGORITHMS)) == default("beta")
    assert float(one(r"it is TRL's `beta = ([0-9.]+)`", PARITY)) == default("beta") == trl_beta


def _parity_rows() -> dict[str, list[str]]:
    section = PARITY.split("| recipe | `loss_type` |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_the_parity_table_is_read():
    assert {"grpo", "dr_grpo", "dapo", "gspo", "gmpo", "conspo"} <= set(_parity_rows())


@pytest.mark.parametrize("recipe", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_each_trl_recipe_row_is_what_the_config_fills_in(recipe, tmp_path):
    from contrastive_rlvr.trainer.parse import parse_config

    _, loss_type, level, eps, scale, beta = _parity_rows()[recipe]
    cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", recipe=recipe)
    low, high = (float(x) for x in eps.split(","))
    assert (cfg.loss_type, cfg.importance_sampling_level) == (loss_type, level)
    assert (cfg.epsilon, cfg.epsilon_high) == (low, high)
    assert str(cfg.scale_rewards) == scale
    yaml_file = tmp_path / "paper-kl.yaml"
    yaml_file.write_text(f"model: x/y\nrecipe: {recipe}\nbeta: null\n")
    assert parse_config(yaml_file, []).beta == float(beta)
