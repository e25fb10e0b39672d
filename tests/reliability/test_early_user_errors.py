"""User errors are found before any model loads and printed as one ``error:`` line (exit 2).

Each scenario runs the real CLI with model loading replaced by a function that fails
the test: an error found only after loading would exit 1 with that AssertionError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_utils import save_tiny_model
from typer.testing import CliRunner

from contrastive_rlvr.cli import app

REWARD = "def ok(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n"


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded before the input was checked")


@pytest.fixture
def guarded(monkeypatch):
    """No model can load: the embedded run inputs and HF loading both fail the test."""
    import contrastive_rlvr.models as models
    import contrastive_rlvr.run.command as run

    monkeypatch.setattr(run, "load_run_inputs", _no_model)
    monkeypatch.setattr(models, "load_model_and_tokenizer", _no_model)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                            for i in range(8)))  # fmt: skip
    no_answer = root / "no_answer.jsonl"
    no_answer.write_text(json.dumps({"problem": "1+1="}) + "\n")
    reward = root / "reward.py"
    reward.write_text(REWARD)
    empty_dir = root / "not_a_model"
    empty_dir.mkdir()
    a_file = root / "a_file"
    a_file.write_text("x")
    return {
        "data": data,
        "no_answer": no_answer,
        "reward": reward,
        "model": save_tiny_model(root / "model"),
        "empty_dir": empty_dir,
        "a_file": a_file,
        "root": root,
    }


def _custom(files, **over) -> list[str]:
    values = {
        "--model": str(files["model"]),
        "--dataset": str(files["data"]),
        "--rewards": f"{files['reward']}:ok",
        "--heldout_size": "2",
    }
    values.update(over)
    return [x for kv in values.items() for x in kv]


TRAIN_CASES = {
    "max_steps negative": (["--max_steps", "-5"], "max_steps=-5"),
    "max_steps zero": (["--max_steps", "0"], "max_steps=0"),
    "epochs zero with max_steps -1": (
        ["--max_steps", "-1", "--num_train_epochs", "0"],
        "num_train_epochs=0",
    ),
    "learning_rate nan": (["--learning_rate", "nan"], "learning_rate=nan"),
    "learning_rate negative": (["--learning_rate", "-1"], "learning_rate=-1"),
    "learning_rate inf": (["--learning_rate", "inf"], "learning_rate=inf"),
    "temperature negative": (["--temperature", "-1"], "temperature=-1"),
    "temperature zero": (["--temperature", "0"], "temperature=0"),
    "top_p zero": (["--top_p", "0"], "top_p=0"),
    "dataset with embedded": (["--dataset", "x.jsonl"],
                              "dataset='x.jsonl' is given with model='embedded'"),
    "rewards with embedded": (["--rewards", "format"],
                              "rewards=['format'] is given with model='embedded'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_train_embedded_errors_before_loading(case, guarded, tmp_path):
    args, message = TRAIN_CASES[case]
    result = CliRunner().invoke(app, ["train", "--output_dir", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "o" / "sft-model").exists()


def _custom_cases(files) -> dict[str, tuple[list[str], str]]:
    root = files["root"]
    return {
        "relative model path missing": (_custom(files, **{"--model": "./no/such/model"}),
                                        "'./no/such/model': no such file or directory"),
        "absolute model path missing": (_custom(files, **{"--model": str(root / "gone" / "m")}),
                                        "no such file or directory"),
        "hub id not cached offline": (_custom(files, **{"--model": "no-org/no-such-model"}),
                                      "not in the Hugging Face cache"),
        "dir without config.json": (_custom(files, **{"--model": str(files["empty_dir"])}),
                                    "has no config.json"),
        "model is a plain file": (_custom(files, **{"--model": str(files["a_file"])}), "is a file"),
        "dataset missing": (_custom(files, **{"--dataset": str(root / "nope.jsonl")}),
                            "file not found"),
        "dataset column missing": (_custom(files, **{"--dataset": str(files["no_answer"])}),
                                   "missing field 'answer'"),
        "reward file missing": (_custom(files, **{"--rewards": str(root / "r.py") + ":f"}),
                                "not found"),
        "reward function missing": (_custom(files, **{"--rewards": f"{files['reward']}:nope"}),
                                    "has no attribute 'nope'"),
        "reward spec malformed": (_custom(files, **{"--rewards": "nonsense"}),
                                  "expected 'module:function'"),
        "heldout takes every row": (_custom(files, **{"--heldout_size": "8"}), "heldout_size=8"),
        "output_dir under a file": (_custom(files, **{"--output_dir": str(files["a_file"] / "o")}),
                                    "is a file, not a directory"),
    }  # fmt: skip


CUSTOM_CASE_NAMES = [
    "relative model path missing", "absolute model path missing", "hub id not cached offline",
    "dir without config.json", "model is a plain file", "dataset missing",
    "dataset column missing", "reward file missing", "reward function missing",
    "reward spec malformed", "heldout takes every row", "output_dir under a file",
]  # fmt: skip


@pytest.mark.parametrize("case", CUSTOM_CASE_NAMES)
def test_train_custom_errors_before_loading(case, files, guarded, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args, message = _custom_cases(files)[case]
    if "--output_dir" not in args:
        args = [*args, "--output_dir", str(tmp_path / "o")]
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output


def test_eval_checks_inputs_before_loading(files, guarded, tmp_path):
    base = ["eval", "--model", str(files["model"]), "--benchmarks", "gsm8k", "--n", "1"]
    cases = {
        "benchmarks dir missing": (
            [*base, "--benchmarks-dir", str(tmp_path / "none"), "--output-dir", str(tmp_path)],
            "does not exist",
        ),
        # GSM8K ships in the package: a benchmark that does not (AIME24) is the one missing.
        "benchmark file missing": (
            ["eval", "--model", str(files["model"]), "--benchmarks", "aime24", "--n", "1",
             "--benchmarks-dir", str(files["empty_dir"]), "--output-dir", str(tmp_path)],
            "is not shipped with the package",
        ),
        "output dir under a file": (
            [*base, "--output-dir", str(files["a_file"] / "out")],
            "is a file, not a directory",
        ),
        "model path missing": (
            ["eval", "--model", "./gone/model", "--benchmarks", "gsm8k"],
            "no such file or directory",
        ),
    }
    for name, (args, message) in cases.items():
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        assert message in result.output, (name, result.output)
        assert "Traceback" not in result.output, name


def test_real_process_prints_one_line_and_debug_the_traceback(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "contrastive_rlvr.cli"]
    args = ["train", "--max_steps", "-5", "--output_dir", str(tmp_path / "o")]
    plain = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2
    assert "Traceback" not in plain.stderr
    # (other lines may be library warnings, e.g. transformers' FutureWarning)
    assert [line for line in plain.stderr.splitlines() if "error" in line.lower()] == [
        "error: max_steps=-5 is invalid: give a number of optimizer steps >= 1, or -1 to train "
        "for num_train_epochs"
    ]
    debug = subprocess.run(
        [*cmd, "--debug", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("error: max_steps=-5")
    assert not (tmp_path / "o").exists()
