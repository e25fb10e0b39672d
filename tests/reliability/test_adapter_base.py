"""An adapter's base model named by a relative path: refused when loaded (it would mean
another model from another directory), and written absolute by the run that saves it."""

from __future__ import annotations

import json

import pytest

from contrastive_rlvr.models import adapter_base
from contrastive_rlvr.run.command import absolute_adapter_base


def _adapter(folder, base: str):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    (folder / "config.yaml").write_text(
        "# contrastive-rlvr train: the resolved config of the run in this folder\n"
    )
    return folder


@pytest.mark.parametrize("base", ["../tiny", "./tiny"])
def test_a_relative_base_is_refused_naming_the_fix(tmp_path, base):
    adapter = _adapter(tmp_path / "runs" / "out", base)
    with pytest.raises(ValueError, match=f"relative path {base!r}.*absolute path"):
        adapter_base(adapter)


def test_a_hub_id_or_absolute_base_is_kept(tmp_path):
    assert adapter_base(_adapter(tmp_path / "a", "org/model")) == "org/model"
    assert adapter_base(_adapter(tmp_path / "b", str(tmp_path / "m"))) == str(tmp_path / "m")


def test_the_run_writes_the_base_it_meant_as_an_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "tiny").mkdir()
    monkeypatch.chdir(tmp_path / "tiny")
    adapter = _adapter(tmp_path / "runs" / "out", "../tiny")  # as PEFT saved what it was given
    absolute_adapter_base(adapter)
    assert adapter_base(adapter) == str((tmp_path / "tiny").resolve())
