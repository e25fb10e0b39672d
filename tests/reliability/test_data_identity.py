"""A run trains on the data its file holds now, and says so when that is not the data a
run it continues (resume, compare) trained on. Each test rewrites a data file and gives
it back its old modification time, as ``touch -r``, archives and syncs do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from datasets import Dataset

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.data import file_fingerprint, load_prompts
from contrastive_rlvr.run.folder import (
    CONFIG_FILE,
    DATA_FILE,
    save_data_identity,
    save_resolved_config,
)
from contrastive_rlvr.run.preflight import load_dataset_of
from contrastive_rlvr.trainer.parse import parse_config


def _rows(answer: str, n: int = 6) -> list[dict]:
    return [{"prompt": f"{i}+{i}=", "answer": answer, "note": f"v{answer}"} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        Dataset.from_list(rows).to_csv(path, index=False)
    else:
        Dataset.from_list(rows).to_parquet(path)


def _rewrite_keeping_mtime(path: Path, rows: list[dict]) -> None:
    """New content of the same size, with the file's old timestamps put back."""
    st = path.stat()
    _write(path, rows)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture(autouse=True)
def own_datasets_cache(tmp_path, monkeypatch):
    # A cache of this test's own, so that another test's cached table cannot answer.
    from datasets import config

    monkeypatch.setattr(config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_file_rewritten_with_its_old_mtime_is_read_anew(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    _write(path, _rows("1"))
    first = load_prompts(path).dataset
    assert first["answer"] == ["1"] * 6 and first["note"] == ["v1"] * 6
    _rewrite_keeping_mtime(path, _rows("7"))  # same size, same mtime: datasets' cache key
    again = load_prompts(path)
    # every column of the new content: none of the old (jsonl mixed the two before)
    assert again.dataset["answer"] == ["7"] * 6
    assert again.dataset["note"] == ["v7"] * 6
    assert again.fingerprint == file_fingerprint(path)


def test_the_fingerprint_is_size_and_sha256_of_the_bytes(tmp_path):
    import hashlib

    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "1+1=", "answer": "2"}\n')
    fp = file_fingerprint(path)
    assert fp == {
        "path": str(path.resolve()),
        "size": 34,  # 33 characters and the newline
        "sha256": hashlib.sha256(b'{"prompt": "1+1=", "answer": "2"}\n').hexdigest(),
    }


def _train_args(tmp_path: Path, data: Path) -> list[str]:
    return ["--model", str(tmp_path / "model"), "--dataset", str(data), "--rewards", "format",
            "--output_dir", str(tmp_path / "run"), "--heldout_size", "1", "--max_steps", "2",
            "--num_generations", "2", "--per_device_train_batch_size", "2"]  # fmt: skip


def test_resume_on_changed_data_is_refused_naming_the_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import contrastive_rlvr.run.command as run_module
    from contrastive_rlvr.cli import app

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / "tokenizer_config.json").write_text("{}")
    (tmp_path / "model" / "model.safetensors").write_bytes(b"\x02" + b"\0" * 7 + b"{}")
    data = tmp_path / "d.jsonl"
    _write(data, _rows("1"))
    args = _train_args(tmp_path, data)
    cfg = parse_config(None, args)
    out = tmp_path / "run"
    out.mkdir()
    # the run as it started: its config and the data it read
    save_resolved_config(cfg, out / CONFIG_FILE)
    save_data_identity(out, cfg, load_dataset_of(cfg).fingerprint)
    assert json.loads((out / DATA_FILE).read_text())["sha256"] == file_fingerprint(data)["sha256"]
    _rewrite_keeping_mtime(data, _rows("7"))

    def no_model(*a, **k):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(run_module, "load_run_inputs", no_model)
    result = CliRunner().invoke(app, ["train", *args, "--resume", "true"])
    assert result.exit_code == 2, result.output
    assert f"dataset='{data}' is not the data the run in {out} trained on" in result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output


@pytest.fixture
def fake_runs(monkeypatch):
    """train() stand-in that writes what a real run writes at its start and end: its
    config.yaml, data.json (from the dataset as preflight loads it) and summary.json."""
    import contrastive_rlvr.run.command as run_module

    calls = []

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        loaded = load_dataset_of(cfg)
        calls.append(loaded.dataset["answer"][0])
        save_resolved_config(cfg, out / CONFIG_FILE)
        save_data_identity(out, cfg, loaded.fingerprint)
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.75, "eval_n": 1}
        (out / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(run_module, "train", fake_train)
    return calls


def test_compare_on_changed_data_is_refused_naming_the_file(tmp_path, fake_runs):
    data = tmp_path / "d.jsonl"
    _write(data, _rows("1"))
    over = ["--model", str(tmp_path / "m"), "--dataset", str(data), "--rewards", "format"]
    spec = cmp.make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=tmp_path / "c",
                         overrides=over)  # fmt: skip
    first = cmp.run_compare(spec, echo=lambda _: None)
    assert fake_runs == ["1"] and first["rows"][0]["seeds"] == [0]
    cmp.run_compare(spec, echo=lambda _: None)  # the same data: the finished run is kept
    assert fake_runs == ["1"]
    _rewrite_keeping_mtime(data, _rows("7"))  # 6 rows of 48 bytes, before and after
    with pytest.raises(ValueError, match=rf"dataset {data} changed: 288 bytes, sha256 \w+ then"):
        cmp.run_compare(spec, echo=lambda _: None)
    assert fake_runs == ["1"]  # the old table was not printed as the new data's
