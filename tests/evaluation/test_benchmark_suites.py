"""Benchmark files: the packaged MATH-500 and GSM8K, and the five public files of the
sandbox's ../shared/benchmarks (skipped where absent): counts, answer normalisation, gold
self-verification; file items with a field mapping; where each is read from.

Every gold answer of all five files (1,919 answers) is verified against
itself with two workers; with a warm fork server that takes a few seconds, so
the full check stays in the fast suite.
"""

import json
from pathlib import Path

import pytest

from contrastive_rlvr.evaluation import BENCHMARKS, ENV_VAR, load_benchmark
from contrastive_rlvr.evaluation.suites import PACKAGED_DIR, resolve_benchmark
from contrastive_rlvr.rewards import MathVerifyReward

EXPECTED_ROWS = {"math500": 500, "amc23": 40, "aime24": 30, "aime25": 30, "gsm8k": 1319}


@pytest.fixture(scope="module")
def data_dir():
    # Not the package's lookup (which knows no such folder): the test's own copy of all five.
    d = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
    if not (d / "aime24.jsonl").exists():
        pytest.skip("../shared/benchmarks (the five public files) not found")
    return d


@pytest.fixture(scope="module")
def reward():
    r = MathVerifyReward(timeout=5, workers=2)
    yield r
    r.close()


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_benchmark_loads_with_right_count(data_dir, name):
    ds = load_benchmark(name, data_dir=data_dir)
    assert len(ds) == EXPECTED_ROWS[name] == BENCHMARKS[name].rows
    assert {"id", "prompt", "answer"} <= set(ds.column_names)  # the file's other columns kept
    assert len(set(ds["id"])) == len(ds)  # ids are unique
    assert all(isinstance(a, str) and a for a in ds["answer"])


def test_answer_types_are_normalised(data_dir):
    # amc23 stores floats (27.0), aime25 ints (70), gsm8k "reasoning #### 18".
    assert load_benchmark("amc23", data_dir=data_dir, limit=1)["answer"] == ["27"]
    assert load_benchmark("aime25", data_dir=data_dir, limit=1)["answer"] == ["70"]
    gsm = load_benchmark("gsm8k", data_dir=data_dir, limit=2)
    assert gsm["answer"] == ["18", "3"]
    assert gsm["prompt"][0].startswith("Janet")
    math500 = load_benchmark("math500", data_dir=data_dir, limit=1)
    assert math500["answer"] == ["\\left( 3, \\frac{\\pi}{2} \\right)"]
    assert math500["id"] == ["test/precalculus/807.json"]


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_every_gold_answer_verifies_against_itself(data_dir, reward, name):
    golds = load_benchmark(name, data_dir=data_dir)["answer"]
    scores = reward.score(["\\boxed{" + g + "}" for g in golds], golds)
    failed = [(g, s.status) for g, s in zip(golds, scores, strict=True) if s.reward != 1.0]
    assert failed == []


def test_directory_from_env_var_and_errors(tmp_path, monkeypatch, data_dir):
    row = {"problem": "1+1?", "answer": 2, "id": 0}
    (tmp_path / "aime25.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert load_benchmark("aime25")["answer"] == ["2"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # not in tmp_path, offline: math500 ships with the package, aime24 does not
    assert resolve_benchmark("math500").origin == "packaged"
    assert len(load_benchmark("math500", limit=3)) == 3
    with pytest.raises(ValueError, match="not shipped with the package") as err:
        load_benchmark("aime24")
    assert "aime24.jsonl not found" in str(err.value) and "--benchmarks-dir" in str(err.value)
    with pytest.raises(ValueError, match="unknown benchmark 'math5000'"):
        load_benchmark("math5000")
    with pytest.raises(ValueError, match="does not exist"):
        load_benchmark("aime25", data_dir=tmp_path / "nope")


def test_packaged_copies_are_whole_with_their_licence_noted():
    # the row counts of the public sets (MATH-500: 500; GSM8K test: 1319)
    assert len(load_benchmark("math500", data_dir=PACKAGED_DIR)) == 500
    assert len(load_benchmark("gsm8k", data_dir=PACKAGED_DIR)) == 1319
    readme = (PACKAGED_DIR / "README.md").read_text()
    assert readme.count("MIT") >= 2 and "grade-school-math" in readme and "prm800k" in readme


def test_a_file_item_with_a_field_mapping(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [{"q": "What is 2 + 3?", "sol": "2 + 3 = 5\n#### 5", "key": "a"},
            {"q": "What is 1,000 + 1?", "sol": "#### 1,001", "key": "b"}]  # fmt: skip
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fields = "prompt=q,answer=sol,id=key,format=gsm8k"
    src = resolve_benchmark(f"mysums={path}", fields=fields)
    assert (src.name, src.source, src.origin) == ("mysums", str(path), "file")
    ds = load_benchmark(str(path), fields=fields)
    # GSM8K format: the number after ####, thousands comma dropped
    assert ds["answer"] == ["5", "1001"] and ds["id"] == ["a", "b"]
    assert ds["prompt"][0] == "What is 2 + 3?"
    assert resolve_benchmark(str(path)).name == "sums"  # the stem
    with pytest.raises(ValueError, match="does not exist"):
        resolve_benchmark(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="'question' is not KEY=VALUE"):
        resolve_benchmark(str(path), fields="question")
