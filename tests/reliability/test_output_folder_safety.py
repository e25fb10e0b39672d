"""A run writes only into a folder that is empty, is a run's of this project, or that
``overwrite_output_dir`` hands over; never into the folder of the model it trains. Each
test puts the user's files there and checks they are left byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_utils import cli, one_line
from trainer_utils import save_tiny_model

from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.folder import (
    CONFIG_FILE,
    foreign_entries,
    save_resolved_config,
)
from contrastive_rlvr.run.output_plan import plan_output_dir
from contrastive_rlvr.trainer.parse import parse_config

USER_FILES = {
    "README.md": "# my model card\n",
    "config.json": '{"model_type": "mine"}\n',
    "tokenizer.json": '{"version": "mine"}\n',
}


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded before the folder was checked")


@pytest.fixture
def guarded(monkeypatch):
    import contrastive_rlvr.models as models
    import contrastive_rlvr.run.command as run_module

    monkeypatch.setattr(run_module, "load_run_inputs", _no_model)
    monkeypatch.setattr(models, "load_model_and_tokenizer", _no_model)


def _user_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    for name, text in USER_FILES.items():
        (path / name).write_text(text)
    return path


def _unchanged(path: Path) -> None:
    for name, text in USER_FILES.items():
        assert (path / name).read_text() == text


def test_a_folder_of_the_users_files_is_refused_before_any_model(tmp_path, guarded):
    out = _user_folder(tmp_path / "mine")
    result = cli(["train", "--output_dir", str(out), "--max_steps", "1"])
    one_line(result, 2, "holds files no run of this project wrote (README.md, config.json, "
                         "tokenizer.json)")  # fmt: skip
    _unchanged(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(USER_FILES)  # no config.yaml either


def test_overwrite_output_dir_hands_the_folder_over(tmp_path):
    out = _user_folder(tmp_path / "mine")
    cfg = parse_config(None, ["--output_dir", str(out), "--overwrite_output_dir", "true"])
    assert plan_output_dir(cfg, out) == (None, None)
    _unchanged(out)  # planning removes nothing of the user's; the run's files replace them


def test_a_runs_folder_and_a_prepared_one_are_accepted(tmp_path):
    # What compare puts in a run folder before the run: the warm start and the run's log.
    prepared = tmp_path / "prepared"
    (prepared / "sft-model").mkdir(parents=True)
    (prepared / "train.log").write_text("")
    assert foreign_entries(prepared) == []
    cfg = parse_config(None, ["--output_dir", str(prepared)])
    assert plan_output_dir(cfg, prepared) == (None, None)
    # A finished run's folder holds the run's own model files: a run's, not foreign.
    run = _user_folder(tmp_path / "run")
    save_resolved_config(cfg, run / CONFIG_FILE)
    assert foreign_entries(run) == []
    assert foreign_entries(tmp_path / "absent") == []


def test_the_models_own_folder_is_refused_even_with_overwrite(tmp_path, guarded):
    model = save_tiny_model(tmp_path / "model")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(8)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["train", "--model", str(model), "--dataset", str(data), "--rewards", "format",
            "--output_dir", str(model), "--overwrite_output_dir", "true"]  # fmt: skip
    one_line(cli(args), 2, "is the folder of model=")
    # the same folder spelled another way (a trailing slash, a relative part)
    one_line(cli([*args[:-3], f"{model}/../model/", *args[-2:]]), 2, "is the folder of model=")
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_resume_into_a_users_folder_writes_nothing(tmp_path):
    out = _user_folder(tmp_path / "mine")
    cfg = parse_config(None, ["--output_dir", str(out), "--resume", "true"])
    with pytest.raises(UserError, match="holds no checkpoint"):
        plan_output_dir(cfg, out)
    _unchanged(out)
