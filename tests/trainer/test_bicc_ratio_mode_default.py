"""The per-recipe default of ``bicc_ratio_mode``: an unset mode takes the recipe's default
(docs/bicc.md, "Ratio mode per recipe"), a mode the user sets always wins, and
``config.yaml`` records the one that ran."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from contrastive_rlvr.algorithms import RECIPES, bicc_defaults
from contrastive_rlvr.method_options.bicc import RECIPE_BICC_RATIO_MODE
from contrastive_rlvr.run.folder import save_resolved_config
from contrastive_rlvr.trainer.parse import parse_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "bicc.md"

# The decision of docs/bicc.md, written out by hand: paper for every clipped policy recipe
# (paper beat consistent on every seed measured), consistent for ConSPO (no ratio in its
# loss: the same updates without the extra pi_old(o|q) forward).
EXPECTED = {
    "grpo": "paper",
    "dr_grpo": "paper",
    "dapo": "paper",
    "gmpo": "paper",
    "gspo": "paper",
    "conspo": "consistent",
}


def _docs_table() -> dict[str, str]:
    """recipe -> default, from the rows of the table under "Ratio mode per recipe"."""
    text = DOCS.read_text()
    section = text.split("### Ratio mode per recipe", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.sub(r"[`*]", "", cells[0]) if cells else ""
        if name in RECIPES:
            rows[name] = re.sub(r"[`*]", "", cells[-1])
    return rows


def test_every_recipe_has_a_default_and_the_docs_table_states_it():
    assert RECIPE_BICC_RATIO_MODE == EXPECTED
    # one table for both engines: verl's config reads algorithms.bicc_defaults too
    assert RECIPE_BICC_RATIO_MODE is bicc_defaults.RECIPE_BICC_RATIO_MODE
    assert set(RECIPE_BICC_RATIO_MODE) == set(RECIPES)
    assert _docs_table() == EXPECTED


@pytest.mark.parametrize("recipe", sorted(EXPECTED))
def test_unset_mode_takes_the_recipes_default(recipe):
    # the embedded default (whose YAML leaves the mode unset), with the paper's form
    cfg = parse_config(None, ["--recipe", recipe, "--bicc_form", "conditioned"])
    assert cfg.bicc and cfg.bicc_ratio_mode == EXPECTED[recipe]
    # the default form (distill) reads no ratio mode: none is resolved
    default = parse_config(None, ["--recipe", recipe])
    assert (default.bicc_form, default.bicc_ratio_mode) == ("distill", None)


@pytest.mark.parametrize("recipe", sorted(EXPECTED))
@pytest.mark.parametrize("mode", ["paper", "consistent"])
def test_a_mode_the_user_sets_wins_and_config_yaml_records_it(tmp_path, recipe, mode):
    cfg = parse_config(None, ["--recipe", recipe, "--bicc_ratio_mode", mode])
    assert cfg.bicc_ratio_mode == mode
    save_resolved_config(cfg, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["bicc_ratio_mode"] == mode


def test_a_config_file_setting_wins_too(tmp_path):
    base = tmp_path / "c.yaml"
    embedded = yaml.safe_load(Path(parse_config(None, []).base_config).read_text())
    base.write_text(yaml.safe_dump({**embedded, "bicc_ratio_mode": "paper"}))
    assert parse_config(str(base), ["--recipe", "conspo"]).bicc_ratio_mode == "paper"
    # and the recorded config.yaml of a run, read back as a config, gives the same mode
    cfg = parse_config(None, ["--recipe", "conspo", "--bicc_form", "conditioned"])
    save_resolved_config(cfg, tmp_path / "config.yaml")
    recorded = yaml.safe_load((tmp_path / "config.yaml").read_text())["bicc_ratio_mode"]
    assert recorded == EXPECTED["conspo"]


def test_a_bad_mode_names_the_field():
    with pytest.raises(ValueError, match="--bicc_ratio_mode: invalid choice: 'plain'"):
        parse_config(None, ["--bicc_ratio_mode", "plain"])
    from contrastive_rlvr.trainer.config import RLVRConfig

    with pytest.raises(ValueError, match="bicc_ratio_mode"):
        RLVRConfig(output_dir="x", bicc=True, bicc_ratio_mode="plain", use_cpu=True)
