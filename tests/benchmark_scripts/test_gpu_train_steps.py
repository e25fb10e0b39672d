"""benchmarks/gpu_train_steps.py (the GPU check's training steps) on CPU, and the bundle's
stand-in for ``datasets`` against the real package."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def steps():
    torch.set_num_threads(1)
    return _load("gpu_train_steps", BENCH / "gpu_train_steps.py")


@pytest.mark.parametrize("recipe, route", [("grpo", "TRL"), ("gmpo", "project")])
def test_steps_with_bicc_and_rcc_train_on_cpu(steps, tmp_path, recipe, route):
    result = steps.run_recipe(recipe, steps.QUICK, device="cpu", steps=2, workdir=tmp_path)
    assert result.loss_route == route
    assert result.steps == 2
    assert result.finite_loss
    # AdamW's first steps move every weight with a gradient by about lr (1e-4) each.
    assert result.weights_changed and 1e-5 < result.max_abs_change < 1e-3
    assert result.bicc_conditioned_frac > 0  # BiCC conditioned rows
    assert result.rcc_baseline_shift > 0  # step 2: delta != 0, so RCC moved baselines
    assert math.isfinite(result.step_time_s) and result.peak_cuda_mib is None
    assert result.passed
    assert steps.format_result(result).split()[:2] == [recipe, "PASS"]


def test_a_spent_budget_runs_nothing_and_fails(steps, capsys):
    code = steps.main(["--device", "cpu", "--quick", "--recipes", "grpo", "--budget-s", "-1"])
    out = capsys.readouterr().out
    assert code == 1
    assert "grpo     FAIL  not run: time budget" in out
    assert "gpu_train_steps: FAIL (0/1 recipes)" in out


def test_datasets_stand_in_matches_the_real_package():
    import datasets

    path = BENCH / "gpu_stand_ins" / "datasets_stand_in" / "__init__.py"
    stand_in = _load("datasets_stand_in", path)
    columns = {"prompt": ["a", "b", "c", "d"], "answer": ["1", "2", "3", "4"]}
    real, ours = datasets.Dataset.from_dict(columns), stand_in.Dataset.from_dict(columns)
    assert len(ours) == len(real) == 4
    assert ours.column_names == real.column_names
    assert ours[2] == real[2] == {"prompt": "c", "answer": "3"}
    assert ours["answer"] == list(real["answer"])
    assert ours[1:3] == real[1:3]
    assert list(ours.select([3, 0])) == list(real.select([3, 0]))
    mapped = ours.map(lambda row: {"prompt": row["prompt"] * 2, "n": len(row["prompt"])})
    expected = real.map(lambda row: {"prompt": row["prompt"] * 2, "n": len(row["prompt"])})
    assert list(mapped) == list(expected) and mapped.column_names == expected.column_names
    shuffled = ours.shuffle(seed=0)
    assert sorted(shuffled["prompt"]) == columns["prompt"]
    assert ours.cache_files == real.cache_files == []
