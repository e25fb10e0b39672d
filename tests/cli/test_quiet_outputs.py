"""Quiet and stated: no deprecation warning of the project's making on any command's
``--help`` (a fresh process, warnings on), a model card that names the model and its
base (an alias as its upstream id) with no Hub link to a local path, and the size a run
leaves on disk said at its end, with ``save_total_limit`` and ``save_only_model``
honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

from trainer_utils import _tiny_run_args
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.trainer.disk import human
from contrastive_rlvr.trainer.model_card import complete_model_card

HELPS = """
import warnings
warnings.simplefilter("always")
from typer.testing import CliRunner
from contrastive_rlvr.cli import app
from contrastive_rlvr.trainer import RLVRConfig
for command in ([], ["train"], ["eval"], ["compare"], ["plot"], ["report"], ["recipes"]):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, (command, result.output)
RLVRConfig(output_dir="x", model="m", report_to="none")
"""


def test_every_help_and_a_config_warn_nothing():
    env = {**os.environ, "PYTHONWARNINGS": "always"}
    done = subprocess.run(
        [sys.executable, "-c", HELPS], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr


def test_card_of_an_alias_names_its_upstream_model(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text(
        "---\nbase_model: None\ndatasets: data/gsm8k.jsonl\ntags:\n- trl\n---\n\n"
        "# Model Card for None\n\nThis model is a fine-tuned version of "
        "[None](https://huggingface.co/None) on the [data/gsm8k.jsonl]"
        "(https://huggingface.co/datasets/data/gsm8k.jsonl) dataset.\n"
        'generator = pipeline("text-generation", model="None")\n'
    )
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)  # the dataset path is relative, as a user types it
    config = SimpleNamespace(
        output_dir=str(tmp_path), model="smollm2-135m", model_name_or_path="smollm2-135m",
        recipe="grpo", dataset="data/gsm8k.jsonl", base_config="paper.yaml", hub_model_id=None,
    )  # fmt: skip
    complete_model_card(config, "/root/.cache/contrastive-rlvr/gguf/SmolLM2-x")
    card = (tmp_path / "README.md").read_text()
    upstream = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert f"[{upstream}](https://huggingface.co/{upstream})" in card
    assert f"base_model: {upstream}\n" in card
    assert "trained from the alias `smollm2-135m`" in card
    assert f"# Model Card for {tmp_path}\n" in card and f'model="{tmp_path}"' in card
    assert "huggingface.co/datasets" not in card and "datasets: data" not in card
    assert "None" not in card


def test_run_states_its_size_and_keeps_what_was_asked(tmp_path):
    args = _tiny_run_args(tmp_path)
    args[args.index("--max_steps") + 1] = "2"
    args[args.index("--save_strategy") + 1] = "steps"
    extra = ["--save_steps", "1", "--save_total_limit", "1", "--save_only_model", "true"]
    result = CliRunner().invoke(app, ["train", *args, *extra])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not (out / "checkpoint-2" / "optimizer.pt").exists()  # weights only
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"{out}: {human(total)} on disk; checkpoint-2 ")
    assert "save_total_limit=N" in line
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_human_sizes():
    assert (human(2_100_000_000), human(540_000_000), human(12_345), human(7)) == (
        "2.1 GB", "540 MB", "12.3 kB", "7 B"
    )  # fmt: skip
