"""Figure scripts and ``contrastive-rlvr report`` read the metric names the code writes
today: a real short run of the embedded default on TRL's loss route (``clip_ratio/*``) feeds
``benchmarks/real_model_figure.py``; the gradient-variance figure reports the ratio of
means and its interval, the number compare's table gives."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.cli import app
from contrastive_rlvr.evaluation import summarize
from contrastive_rlvr.html_report import write_report
from contrastive_rlvr.plots import find_runs, gradvar_ratio_of_means, plot_runs

ROOT = Path(__file__).resolve().parents[2]
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
    assert tmp_path / "figs" / "transfer_grpo.png" not in paths  # no BiCC run: no figure


def test_the_transfer_figure_draws_the_bicc_runs_probes(tmp_path):
    run = tmp_path / "b0"
    run.mkdir()
    summary = {"recipe": "grpo", "bicc": True, "rcc": False, "seed": 0, "steps": 3}
    (run / "summary.json").write_text(json.dumps(summary))
    lines = [{"step": 1, "reward": 0.5, "bicc/transfer_cos": 0.02}, {"step": 2, "reward": 0.5},
             {"step": 3, "reward": 0.6, "bicc/transfer_cos": -0.01}]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    runs = find_runs([tmp_path])
    assert runs[0].series("bicc/transfer_cos")[1].tolist() == [0.02, -0.01]
    assert tmp_path / "figs" / "transfer_grpo.png" in plot_runs([tmp_path], tmp_path / "figs")


# ---------------------------------------------------------------------- contrastive-rlvr report


class _Page(HTMLParser):
    """Tables (rows of cell texts), image sources and every external reference of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.external: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        if tag == "img":
            self.images.append(attrs["src"])
        for key in ("src", "href"):
            if key in attrs and not str(attrs[key]).startswith("data:"):
                self.external.append(attrs[key])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    assert page.external == []  # self-contained: nothing outside the file
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    return page


def test_report_of_a_real_run_has_counts_intervals_curves_and_diagnostics(trl_route_run, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(trl_route_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = _parse(out)
    summary = json.loads((trl_route_run / "summary.json").read_text())
    run_table = {row[0]: row[1] for row in page.tables[0]}
    after = summary["heldout_after"]
    # 4 held-out problems (eval_limit), 1 sample each
    assert (after["problems"], after["samples"]) == (4, 4)
    assert run_table["held-out avg@1 after RL"] == (
        f"{after['avg_at_n']:.3f} [{after['ci_low']:.3f}, {after['ci_high']:.3f}] "
        f"({after['correct']}/4 samples, 4 problems)"
    )
    diag = page.tables[1]
    assert "clip_ratio/region_mean" in diag[0] and "rcc/cov" in diag[0]
    rows = [json.loads(x) for x in (trl_route_run / "metrics.jsonl").read_text().splitlines()]
    cov = sum(r["rcc/cov"] for r in rows) / len(rows)
    assert diag[1][diag[0].index("rcc/cov")] == f"{cov:.4g}"
    assert len(page.images) >= 3  # curves, cov, gradvar at least


def test_report_of_a_one_seed_compare_says_no_interval(tmp_path):
    run = _fake_run(tmp_path / "grpo" / "rcc" / "seed0", 0, [1.0, 3.0], [1.0, 1.5])
    one = {"mean": 0.6, "ci_half_width": None, "ci_low": None, "ci_high": None, "n": 1}
    rows = [{"recipe": "grpo", "arm": "rcc", "label": "GRPO + RCC", "seeds": [0], "after": one,
             "before": one, "diff_vs_plain": dict(one, mean=0.02),
             "grad_var_ratio": dict(one, mean=0.625)}]  # fmt: skip
    report = {"metric": "held-out avg@4", "ci": "95% t", "difference": "paired", "rows": rows,
              "failed": [], "grad_var": "ratio of means",
              "no_interval": cmp.ONE_SEED_NOTE}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(report))
    page = _parse(write_report(tmp_path))
    assert page.tables[0][1] == [
        "GRPO + RCC", "60.0 (no interval: 1 seed)", "+2.0 (no interval: 1 seed)",
        "60.0 (no interval: 1 seed)", "1",
    ]  # fmt: skip
    assert "One seed: no interval exists" in "".join(page.text)
    assert page.tables[1][1] == ["GRPO + RCC", "0.625 (no interval: 1 seed)"]
    assert run.exists() and page.images  # the fake run's figures are in


def test_report_of_an_eval_folder(tmp_path):
    r = summarize("hand", [[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]], [[0] * 4] * 3)
    r.source = "/data/hand.jsonl"
    results = {"config": {"model": "m"}, "benchmarks": {"hand": r.to_json()}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    page = _parse(write_report(tmp_path))
    header, row = page.tables[0]
    assert header[:5] == ["benchmark", "problems", "n", "correct samples", "avg@n = pass@1"]
    lo, hi = r.intervals["avg_at_n"]["ci_low"], r.intervals["avg_at_n"]["ci_high"]
    assert row[:5] == ["hand", "3", "4", "5", f"0.417 [{lo:.3f}, {hi:.3f}]"]
    assert row[-1] == "/data/hand.jsonl"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no results.json"):
        write_report(tmp_path / "empty")


def test_a_band_keeps_every_step_any_seed_logged(tmp_path):
    """Probes missing on some seeds (no signal in the probed micro-batch) or a seed that
    stopped early: each step is drawn over the seeds that logged it, not dropped for all."""
    from contrastive_rlvr.plots import _mean_band

    probes = {0: [(1, 0.8), (3, 0.9), (5, 0.7)], 1: [(1, 0.6), (3, 0.5), (7, 0.4)]}
    for seed, rows in probes.items():
        run = tmp_path / f"b{seed}"
        run.mkdir()
        summary = {"recipe": "grpo", "bicc": True, "rcc": False, "seed": seed, "steps": 7}
        (run / "summary.json").write_text(json.dumps(summary))
        lines = [{"step": step, "bicc/transfer_cos": value} for step, value in rows]
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    steps, mean, low, high, counts = _mean_band(find_runs([tmp_path]), "bicc/transfer_cos")
    assert steps.tolist() == [1, 3, 5, 7]
    assert mean.tolist() == pytest.approx([0.7, 0.7, 0.7, 0.4])  # (0.8+0.6)/2, (0.9+0.5)/2
    assert low.tolist() == [0.6, 0.5, 0.7, 0.4] and high.tolist() == [0.8, 0.9, 0.7, 0.4]
    assert counts.tolist() == [2, 2, 1, 1]
