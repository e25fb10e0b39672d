"""The one secrets rule (``redaction``): a token never reaches disk or the terminal in
clear. Each place a config is written or shown is given a ``--hub_token`` and a
``model_init_kwargs`` token and searched for their bytes."""

from __future__ import annotations

import json
import pickle

import pytest
from cli_utils import cli

from contrastive_rlvr.redaction import HIDDEN, is_secret_name, redact, redact_args
from contrastive_rlvr.run.folder import save_resolved_config
from contrastive_rlvr.trainer.parse import parse_config

HUB, INIT = "hf_hubSECRET123", "hf_initSECRET456"
ARGS = ["--hub_token", HUB, "--model_init_kwargs", json.dumps({"token": INIT})]


def _clear(text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    assert HUB.encode() not in data and INIT.encode() not in data


def test_what_a_secret_is():
    for name in ("hub_token", "token", "--hub-token", "api_key", "wandb_password"):
        assert is_secret_name(name), name
    for name in ("pad_token", "eos_token_id", "max_new_tokens", "bicc_item_prefix"):
        assert not is_secret_name(name), name


def test_redact_hides_secrets_in_mappings_strings_and_argument_lists():
    assert redact({"a": {"token": "x"}, "pad_token": "<pad>"}) == {
        "a": {"token": HIDDEN},
        "pad_token": "<pad>",
    }
    assert redact_args(["--hub_token", "x", "--lr", "1", "--hub_token=y"]) == [
        "--hub_token", HIDDEN, "--lr", "1", f"--hub_token={HIDDEN}",
    ]  # fmt: skip
    _clear(json.dumps(redact({"overrides": ARGS, "s": json.dumps({"token": INIT})})))


def test_config_yaml_to_dict_and_the_pickled_args_hold_no_token(tmp_path):
    cfg = parse_config(None, [*ARGS, "--output_dir", str(tmp_path)])
    assert cfg.hub_token == HUB and cfg.model_init_kwargs["token"] == INIT  # kept in memory
    save_resolved_config(cfg, tmp_path / "config.yaml")
    _clear((tmp_path / "config.yaml").read_text())
    _clear(json.dumps(cfg.to_dict(), default=str))
    _clear(pickle.dumps(cfg))  # what training_args.bin holds
    assert cfg.model_init_kwargs["token"] == INIT  # pickling changed nothing in memory


@pytest.mark.parametrize("flag", ["--fields", "--help"])
def test_fields_and_help_show_no_token(flag):
    result = cli(["train", flag, *ARGS])
    assert result.exit_code == 0, result.output
    _clear(result.output)


def test_compare_results_spec_holds_no_token(tmp_path):
    from contrastive_rlvr.compare import make_spec
    from contrastive_rlvr.compare.tables import build_results

    spec = make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=tmp_path,
                     overrides=list(ARGS))  # fmt: skip
    report = build_results([], spec)
    _clear(json.dumps(report))
    assert HIDDEN in json.dumps(report["spec"]["overrides"])


def test_the_command_printed_after_an_interrupt_shows_no_token(tmp_path):
    from contrastive_rlvr.trainer.interrupts import continue_command, interrupted_note

    _clear(continue_command(None, [*ARGS, "--seed", "1"]))
    _clear(interrupted_note(tmp_path / "none", None, list(ARGS)))
