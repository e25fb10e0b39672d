"""A reward file (``file.py:function``) that fails to import is one line naming the file
and the cause, before any model loads; one whose functions go through a process pool
works (its module is registered, so they pickle)."""

from __future__ import annotations

import json
import pickle

import pytest
from cli_utils import cli

from contrastive_rlvr.rewards import resolve_reward

POOL_REWARD = """from concurrent.futures import ProcessPoolExecutor
import multiprocessing


def _score(completion):
    return float(len(completion) % 2)


def pooled(prompts, completions, **kwargs):
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        return list(pool.map(_score, completions))
"""


@pytest.fixture
def guarded(monkeypatch):
    import contrastive_rlvr.models as models
    import contrastive_rlvr.run.command as run_module

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the rewards were checked")

    monkeypatch.setattr(run_module, "load_run_inputs", no_model)
    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import not_a_package_here\n\ndef f(p, c, **k):\n    return [0.0] * len(c)\n",
         "no module named 'not_a_package_here' (install it: pip install not_a_package_here)"),
        ("def f(p, c, **k)\n    return [0.0] * len(c)\n",
         "SyntaxError at line 1: expected ':'"),
        ("TABLE = {}\nLIMIT = TABLE['limit']\n\ndef f(p, c, **k):\n    return [0.0]\n",
         "KeyError at line 2: 'limit'"),
    ],
    ids=["missing package", "syntax error", "exception at import"],
)
def test_a_reward_file_that_fails_to_import_is_one_line(tmp_path, guarded, source, message):
    reward = tmp_path / "reward.py"
    reward.write_text(source)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "tokenizer_config.json").write_text("{}")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x02" + b"\0" * 7 + b"{}")
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(8)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli(["train", "--model", str(tmp_path / "m"), "--dataset",
                   str(tmp_path / "d.jsonl"), "--rewards", f"{reward}:f", "--heldout_size", "1",
                   "--output_dir", str(tmp_path / "o")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"importing '{reward}' failed: {message}" in result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output


def test_a_reward_file_using_a_process_pool_over_its_own_functions(tmp_path):
    reward = tmp_path / "pooled.py"
    reward.write_text(POOL_REWARD)
    fn = resolve_reward(f"{reward}:pooled")
    # 3, 4 and 6 characters: odd, even, even
    assert fn(["q"] * 3, ["abc", "abcd", "abcdef"]) == [1.0, 0.0, 0.0]
    assert pickle.loads(pickle.dumps(fn)) is fn  # by reference, as a pool sends it


def test_two_files_of_one_name_are_two_modules(tmp_path):
    for folder, value in (("a", 1.0), ("b", 2.0)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "rewards.py").write_text(
            f"def r(p, c, **k):\n    return [{value}] * len(c)\n"
        )
    a = resolve_reward(f"{tmp_path / 'a' / 'rewards.py'}:r")
    b = resolve_reward(f"{tmp_path / 'b' / 'rewards.py'}:r")
    assert (a([""], ["x"]), b([""], ["x"])) == ([1.0], [2.0])
    assert pickle.loads(pickle.dumps(a)) is a and pickle.loads(pickle.dumps(b)) is b


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_reward_file_others_can_change_is_imported_with_a_warning(tmp_path, caplog, where):
    import os

    from contrastive_rlvr.rewards.loading import load_reward_function

    folder = tmp_path / "shared"
    folder.mkdir()
    reward = folder / "reward.py"
    reward.write_text("def f(prompts, completions, **k):\n    return [0.0] * len(completions)\n")
    os.chmod(reward if where == "file" else folder, 0o777 if where == "folder" else 0o666)
    with caplog.at_level("WARNING"):
        load_reward_function(f"{reward}:f")
    assert "anyone on this machine could change what it runs" in caplog.text
    said = "writable by every user" if where == "file" else "lets every user replace it"
    assert said in caplog.text
