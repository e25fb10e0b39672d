"""Figure scripts read the metric names the code writes today: a real short run of the
embedded default on TRL's loss route (``clip_ratio/*``) feeds
``benchmarks/real_model_figure.py``; the gradient-variance figure reports the ratio of
means and its interval, the number compare's table gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.plots import find_runs, gradvar_ratio_of_means, plot_runs

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--max_steps", "2", "--embedded_sft_steps", "20", "--eval_n", "1", "--eval_limit", "4",
    "--save_strategy", "no", "--diagnostics_every", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def trl_route_run(tmp_path_factory) -> Path:
    """GRPO + BiCC (bicc_mix 1) + RCC on the embedded task: TRL's _compute_loss runs, so
    the clip share is logged as clip_ratio/region_mean, not clip/frac."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("fig") / "run"
    args = ["train", "--output_dir", str(out), "--bicc", "true", "--rcc", "true"]
    result = CliRunner().invoke(app, [*args, "--bicc_mix", "1.0", *TINY])
    assert result.exit_code == 0, result.output
    return out


def test_real_model_figure_reads_a_trl_route_run(trl_route_run, tmp_path):
    rows = [json.loads(x) for x in (trl_route_run / "metrics.jsonl").read_text().splitlines()]
    # the run is what the test claims: TRL's names, none of the project loss's
    assert all("clip_ratio/region_mean" in r and "clip/frac" not in r for r in rows)
    assert all("bicc/context_tokens" in r for r in rows)
    out = tmp_path / "curves.png"
    script = str(ROOT / "benchmarks/real_model_figure.py")
    done = subprocess.run(
        [sys.executable, script, str(trl_route_run), str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "clip share from clip_ratio/region_mean" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_real_model_figure_on_a_folder_without_metrics_says_so(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/real_model_figure.py"), str(tmp_path), "x.png"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "metrics.jsonl not found" in done.stderr


def _fake_run(path: Path, seed: int, plain: list[float], rcc: list[float]) -> Path:
    path.mkdir(parents=True)
    cfg = {"recipe": "grpo", "bicc": False, "rcc": True, "seed": seed, "steps": len(plain)}
    cfg |= {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.6}
    (path / "summary.json").write_text(json.dumps(cfg))
    lines = [
        {"step": i + 1, "reward": 0.5, "diag/grad_var_plain": p, "diag/grad_var_rcc": r,
         "diag/grad_var_ratio": r / p}
        for i, (p, r) in enumerate(zip(plain, rcc, strict=True))
    ]  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_gradvar_legend_is_the_ratio_of_means_with_its_interval(tmp_path):
    # seed 0: steps (plain, rcc) = (1, 1), (3, 1.5): ratio of means 2.5 / 4 = 0.625
    #   (the mean of step ratios would be (1 + 0.5) / 2 = 0.75: the biased number)
    # seed 1: (2, 1), (2, 2): ratio of means 3 / 4 = 0.75
    _fake_run(tmp_path / "s0", 0, [1.0, 3.0], [1.0, 1.5])
    _fake_run(tmp_path / "s1", 1, [2.0, 2.0], [1.0, 2.0])
    runs = find_runs([tmp_path])
    text, ci = gradvar_ratio_of_means(runs)
    # mean 0.6875; sd of (0.625, 0.75) = 0.125 / sqrt(2) = 0.0883883; t_{0.975,1} = 12.7062
    # half-width = 12.7062 * 0.0883883 / sqrt(2) = 0.794138
    assert ci.mean == pytest.approx(0.6875)
    assert ci.half_width == pytest.approx(12.7062 * 0.125 / 2, rel=1e-4)
    assert "ratio of means 0.688" in text and "[-0.107, 1.482]" in text and "2 seeds" in text
    one_text, one = gradvar_ratio_of_means(runs[:1])
    assert one.mean == pytest.approx(0.625) and one.half_width is None
    assert "1 seed: no interval" in one_text
    paths = plot_runs([tmp_path], tmp_path / "figs")
    assert tmp_path / "figs" / "gradvar_grpo.png" in paths
