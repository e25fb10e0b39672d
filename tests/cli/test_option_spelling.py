"""Option spelling: no prefixes, --debug after the subcommand (TRL's --debug VALUE kept),
--output_dir on every command."""

from __future__ import annotations

from typer.testing import CliRunner

from contrastive_rlvr.cli import _STATE, _take_debug, app


def test_option_prefixes_are_refused():
    result = CliRunner().invoke(app, ["train", "--max_step", "7"])
    assert result.exit_code == 2
    assert "--max_step" in result.output and "not used" in result.output


def test_a_field_without_its_dashes_is_refused_saying_how_to_write_it():
    for args, fix in ((["seed", "3"], "write --seed, not seed"),
                      (["-seed=3"], "write --seed=3, not -seed=3")):  # fmt: skip
        result = CliRunner().invoke(app, ["train", *args])
        assert result.exit_code == 2 and result.output.count("error:") == 1
        assert "not used" in result.output and fix in result.output


def test_null_on_the_command_line_is_none_as_in_yaml(tmp_path):
    from contrastive_rlvr.trainer.parse import parse_config

    # beta null: the recipe's KL weight (grpo 0.04), as `beta: null` in a YAML gives
    args = ["--output_dir", str(tmp_path), "--recipe", "grpo"]
    assert parse_config(None, [*args, "--beta", "null"]).beta == 0.04
    assert parse_config(None, [*args, "--beta", "0.5"]).beta == 0.5


def test_debug_after_the_subcommand_gives_the_traceback(monkeypatch):
    monkeypatch.setitem(_STATE, "debug", False)
    result = CliRunner().invoke(app, ["train", "--max_step", "7", "--debug"])
    assert result.exit_code == 2 and "Traceback" in result.output
    monkeypatch.setitem(_STATE, "debug", False)
    # transformers' own --debug takes a value and stays an override for TRL
    assert _take_debug(["--debug", "underflow_overflow", "--seed", "1"]) == [
        "--debug", "underflow_overflow", "--seed", "1"
    ]  # fmt: skip
    assert _STATE["debug"] is False
    assert _take_debug(["--seed", "1", "--debug"]) == ["--seed", "1"] and _STATE["debug"]


def test_output_dir_is_spelled_the_same_on_every_command():
    runner = CliRunner()
    for command in ("train", "eval", "compare", "plot"):
        # wide enough that rich does not cut the option names
        text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "240"}).output
        assert "--output_dir" in text, command


def test_help_shows_the_values_the_run_would_use():
    from contrastive_rlvr.trainer.parse import config_help, parse_config

    # a bare train runs the embedded default: lr 1e-4 and BiCC on (the code: 1e-6, off)
    text = " ".join(config_help(parse_config(None, [])).split())
    assert "The initial learning rate for AdamW. [this run: 0.0001] (default: 1e-06)" in text
    assert "Bilateral Context Conditioning on/off. [this run: True]" in text
    # --model X starts from paper.yaml: lr 1e-6 as the code, so nothing added there
    text = " ".join(config_help(parse_config(None, ["--model", "x/y"])).split())
    assert "The initial learning rate for AdamW. (default: 1e-06)" in text
