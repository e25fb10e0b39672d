"""``--dataset`` / ``--dataset_name`` take local dataset folders in every layout
``datasets`` writes or the Hub uses (a saved Dataset, a saved DatasetDict, a Hub
repository's files with configurations), with the configuration and split honoured, and
refused (one line naming what the source has) where the source has none."""

from __future__ import annotations

import pytest
from datasets import Dataset, DatasetDict
from trainer_utils import make_config, save_tiny_model

from contrastive_rlvr.data import load_prompts
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.preflight import preflight


def _rows(tag: str, n: int = 6) -> Dataset:
    # GSM8K's layout: question, and a worked answer ending in "#### N"
    return Dataset.from_dict({
        "question": [f"{tag} {i}+1?" for i in range(n)],
        "answer": [f"{i} plus 1.\n#### {i + 1}" for i in range(n)],
    })  # fmt: skip


def test_saved_dataset_folder(tmp_path):
    _rows("saved").save_to_disk(tmp_path / "ds")
    loaded = load_prompts(tmp_path / "ds").dataset
    assert loaded["prompt"][2] == "saved 2+1?" and loaded["answer"][2] == "3"


def test_saved_dataset_dict_folder_takes_the_split(tmp_path):
    DatasetDict({"train": _rows("tr"), "test": _rows("te", 3)}).save_to_disk(tmp_path / "dd")
    assert load_prompts(tmp_path / "dd").dataset["prompt"][0] == "tr 0+1?"
    test = load_prompts(tmp_path / "dd", split="test").dataset
    assert len(test) == 3 and test["prompt"][0] == "te 0+1?"
    splits = r"no split 'validation'; its splits are \['test', 'train'\]"
    with pytest.raises(ValueError, match=splits):
        load_prompts(tmp_path / "dd", split="validation")
    with pytest.raises(ValueError, match="dataset_config='main'.*has none"):
        load_prompts(tmp_path / "dd", hub_config="main")


def _hub_layout(root):
    """The files of a Hub dataset repository with two configurations (as openai/gsm8k)."""
    for config in ("main", "socratic"):
        (root / config).mkdir(parents=True)
        _rows(f"{config}-train").to_parquet(root / config / "train-00000-of-00001.parquet")
        _rows(f"{config}-test", 2).to_parquet(root / config / "test-00000-of-00001.parquet")
    (root / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n"
        "- config_name: socratic\n  data_files:\n"
        "  - split: train\n    path: socratic/train-*\n"
        "  - split: test\n    path: socratic/test-*\n"
        "---\n# a dataset\n"
    )
    return root


def test_hub_layout_folder_with_config_and_split(tmp_path):
    root = _hub_layout(tmp_path / "gsm8k")
    main = load_prompts(root, hub_config="main").dataset
    assert main["prompt"][0] == "main-train 0+1?" and main["answer"][0] == "1"
    socratic = load_prompts(root, hub_config="socratic", split="test").dataset
    assert len(socratic) == 2 and socratic["prompt"][1] == "socratic-test 1+1?"
    with pytest.raises(ValueError, match="config 'nope'"):
        load_prompts(root, hub_config="nope")


def test_a_config_or_split_on_a_single_file_is_refused(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    _rows("file").to_json(path)
    assert len(load_prompts(path).dataset) == 6
    with pytest.raises(ValueError, match="dataset_config='main' names a configuration, but"):
        load_prompts(path, hub_config="main")
    with pytest.raises(ValueError, match="dataset_train_split='test' names a split, but"):
        load_prompts(path, split="test")


def test_dataset_name_folder_through_preflight(tmp_path):
    root = _hub_layout(tmp_path / "gsm8k")
    config = make_config(
        tmp_path, model=str(tmp_path / "m"), dataset_name=str(root), dataset_config="main",
        heldout_size=2, rewards=["math_verify"],
    )  # fmt: skip
    save_tiny_model(tmp_path / "m")
    checked = preflight(config)  # no model loads here
    assert len(checked.prompts.dataset) == 6
    file_config = make_config(tmp_path, model=str(tmp_path / "m"),
                              dataset=str(tmp_path / "x.jsonl"), dataset_config="main")  # fmt: skip
    _rows("file").to_json(tmp_path / "x.jsonl")
    with pytest.raises(UserError, match="dataset_config='main' names a configuration"):
        preflight(file_config)


def test_glob_characters_in_a_path(tmp_path):
    """datasets reads data_files and a folder's files as glob patterns: a file under a
    "[v2]" folder is read as written; a Hub-layout folder there is refused in one line."""
    path = tmp_path / "runs[v2]" / "gsm8k.jsonl"
    path.parent.mkdir()
    _rows("file").to_json(path)
    assert load_prompts(path).dataset["prompt"][1] == "file 1+1?"
    root = _hub_layout(tmp_path / "data[1]")
    with pytest.raises(ValueError, match=r"holds a glob character .*: rename the folder"):
        load_prompts(root, hub_config="main")
