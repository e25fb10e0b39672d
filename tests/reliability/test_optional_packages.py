"""Options that need a package the project does not install (vLLM, PEFT, DeepSpeed, Liger,
flash-attention) are refused at start, one error line per missing package, before any
model loads (the model here is a path that does not exist: a load would fail on it)."""

from __future__ import annotations

import importlib.util

import pytest
from trainer_utils import make_config
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.preflight import check_optional_packages, preflight


@pytest.fixture
def without(monkeypatch):
    """Make the named modules look uninstalled to ``importlib.util.find_spec``."""
    hidden: set[str] = set()
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name.split(".")[0] in hidden:
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return hidden


def test_missing_vllm_and_peft_are_each_named_before_the_model(tmp_path, without):
    without.update({"vllm", "peft"})
    config = make_config(tmp_path, use_peft=True)
    config.use_vllm = True  # TRL's own check of use_vllm runs later, in the trainer
    with pytest.raises(UserError) as err:
        preflight(config)
    lines = str(err.value).split("\n")
    assert len(lines) == 2
    assert lines[0].startswith("use_vllm=true needs vllm, which is not installed")
    assert lines[1].startswith("use_peft=true needs peft, which is not installed")


def test_installed_or_unset_options_pass(tmp_path, without):
    without.add("vllm")
    check_optional_packages(make_config(tmp_path))  # use_vllm unset: vLLM not needed
    check_optional_packages(make_config(tmp_path, use_peft=True))  # peft is installed here


def test_flash_attention_and_deepspeed(tmp_path, without):
    without.update({"flash_attn", "deepspeed"})
    config = make_config(tmp_path, attn_implementation="flash_attention_2")
    config.deepspeed = "ds.json"
    with pytest.raises(UserError) as err:
        check_optional_packages(config)
    text = str(err.value)
    assert "attn_implementation=flash_attention_2 needs flash-attn" in text
    assert "deepspeed='ds.json' needs deepspeed" in text


def test_cli_prints_one_error_line_per_missing_package(tmp_path, without):
    without.update({"vllm", "peft"})
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(20)))
    args = ["train", "--model", str(tmp_path / "no-such-model"), "--dataset", str(data),
            "--output_dir", str(tmp_path / "out"),
            "--use_vllm", "true", "--use_peft", "true"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 2, result.output
    assert "needs vllm" in errors[0] and "needs peft" in errors[1]
    assert "Traceback" not in result.output
