"""Benchmark files in ../shared/benchmarks: counts, answer normalisation, gold self-verification.

Every gold answer of all five files (1,919 answers) is verified against
itself with two workers; with a warm fork server that takes a few seconds, so
the full check stays in the fast suite.
"""

import json

import pytest

from contrastive_rlvr.evaluation import BENCHMARKS, ENV_VAR, benchmarks_dir, load_benchmark
from contrastive_rlvr.rewards import MathVerifyReward

EXPECTED_ROWS = {"math500": 500, "amc23": 40, "aime24": 30, "aime25": 30, "gsm8k": 1319}


@pytest.fixture(scope="module")
def data_dir():
    d = benchmarks_dir()
    if d is None or not (d / "math500.jsonl").exists():
        pytest.skip("../shared/benchmarks not found next to the repository")
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
    assert ds.column_names == ["id", "prompt", "answer"]
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
    with pytest.raises(ValueError, match="math500.jsonl"):
        load_benchmark("math500")  # not in tmp_path, and offline
    with pytest.raises(ValueError, match="unknown benchmark 'math5000'"):
        load_benchmark("math5000")
    with pytest.raises(ValueError, match="does not exist"):
        load_benchmark("aime25", data_dir=tmp_path / "nope")
