"""Issue 18, the items left after its first round: --debug after every subcommand,
`train --fields`, the project's INFO lines at --log_level info, local json/jsonl/parquet
through datasets.load_dataset, dotted field paths (DAPO-Math-17k's layout), TRL's default
beta, push_to_hub at the end of a run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contrastive_rlvr.cli import _STATE, DEBUG_HINT, app

# A command line per subcommand that fails on bad input before any model loads.
FAILING = {
    "train": ["train", "--max_step", "7"],
    "compare": ["compare", "--recipes", "nosuch"],
    "plot": ["plot", "/nonexistent-run-folder"],
    "report": ["report", "/nonexistent-run-folder"],
    "eval": ["eval", "--model", "x", "--limit", "0"],
}


def _commands() -> set[str]:
    return {c.name or c.callback.__name__ for c in app.registered_commands}


def test_every_subcommand_is_covered_below():
    assert _commands() == set(FAILING) | {"recipes"}


@pytest.mark.parametrize("command", sorted(FAILING))
def test_debug_after_every_subcommand_prints_the_traceback(command, monkeypatch):
    monkeypatch.setitem(_STATE, "debug", False)
    plain = CliRunner().invoke(app, FAILING[command])
    assert plain.exit_code == 2, plain.output
    assert "Traceback" not in plain.output
    # the hint names the flag and where it goes
    assert plain.output.strip().endswith(DEBUG_HINT.strip())
    assert "add --debug anywhere on the command line" in plain.output
    after = CliRunner().invoke(app, [*FAILING[command], "--debug"])
    assert after.exit_code == 2, after.output
    assert "Traceback (most recent call last)" in after.output
    assert "No such option" not in after.output
    # and the next command line starts without it again
    again = CliRunner().invoke(app, FAILING[command])
    assert "Traceback" not in again.output


def test_debug_after_recipes_is_accepted():
    result = CliRunner().invoke(app, ["recipes", "--debug"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("grpo ")


# -- item: one default beta (TRL's) ------------------------------------------------------


def test_rlvrconfig_default_beta_is_trls(tmp_path):
    from trl import GRPOConfig

    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.parse import parse_config

    trl_beta = GRPOConfig(output_dir=str(tmp_path), report_to="none", bf16=False).beta
    assert trl_beta == 0.0
    for recipe in ("grpo", "dr_grpo", "dapo"):
        cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", recipe=recipe)
        assert cfg.beta == trl_beta, recipe
    # the papers' KL weights on request: DeepSeekMath's 0.04, the BiCC paper's Dr.GRPO 0.01
    yaml_file = tmp_path / "paper-kl.yaml"
    yaml_file.write_text("model: x/y\nbeta: null\n")
    assert parse_config(yaml_file, []).beta == 0.04
    assert parse_config(yaml_file, ["--recipe", "dr_grpo"]).beta == 0.01
