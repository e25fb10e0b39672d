"""``contrastive-rlvr report`` opened in a headless browser: the page a reader opens shows
the table rows and their intervals as rendered text, every embedded figure decodes to a
picture, and the figures paint.

Needs a ``chromium`` (or ``chromium-browser`` / ``google-chrome``) binary; without one every
test here skips with that reason (``make test`` prints it: pytest runs with ``-ra``) and the
report is still checked by parsing its HTML (tests/reporting/test_figures.py). On Debian:
``apt-get install chromium``.

The browser loads a copy of the page with a small probe script appended (the report itself
has no script): after the load event it writes, as JSON in a ``<pre id="probe">``, every
table's cells as the browser renders them (``innerText``) and every image's decode state
(``complete``, ``naturalWidth``, ``naturalHeight``); ``--dump-dom`` prints the DOM then.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from contrastive_rlvr.evaluation import summarize
from contrastive_rlvr.html_report import write_report

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary found (apt-get install chromium): the report is checked by "
    "parsing only (tests/reporting/test_figures.py)",
)

_PROBE = """<script>window.addEventListener('load', () => {
  const out = {
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete,
                                           width: i.naturalWidth, height: i.naturalHeight})),
    tables: [...document.querySelectorAll('table')].map(
      t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))),
    text: document.body.innerText,
  };
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", f"--user-data-dir={tmp / 'chromium-profile'}",
         *args],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _rendered(page: Path, tmp: Path) -> dict:
    """What the browser shows of ``page``: tables, image decode states, the body's text."""
    probed = tmp / f"{page.stem}-probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"))
    done = _chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", probed.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, f"the probe did not run; DOM tail: {done.stdout[-1000:]}"
    # --dump-dom serialises the text node HTML-escaped
    text = found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return json.loads(text)


def _run(path: Path, seed: int, rcc: bool, rewards: list[float]) -> None:
    path.mkdir(parents=True)
    summary = {"recipe": "grpo", "bicc": False, "rcc": rcc, "seed": seed, "steps": len(rewards),
               "heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.6}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    rows = []
    for i, r in enumerate(rewards):
        row = {"step": i + 1, "reward": r}
        if rcc:  # what an RCC arm logs: its covariance and the same-batch variances
            row |= {"rcc/cov": 0.01 * i, "diag/grad_var_plain": 2.0 + i,
                    "diag/grad_var_rcc": 1.0 + i}  # fmt: skip
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def _ci(mean: float, half: float, n: int = 3) -> dict:
    return {"mean": mean, "ci_half_width": half, "ci_low": mean - half,
            "ci_high": mean + half, "n": n}  # fmt: skip


@pytest.fixture(scope="module")
def compare_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compare folder of GRPO plain and RCC, 3 seeds, 3 steps each. Held-out after RL:
    plain 0.5 / 0.6 / 0.7 -> mean 0.6, sd 0.1, t_{0.975,2} = 4.303, half-width
    4.303 * 0.1 / sqrt(3) = 0.2484; RCC 0.6 / 0.65 / 0.7 -> 0.65 ± 0.1242; paired
    difference +0.1 / +0.05 / 0 -> +0.05 ± 0.1242. RCC's variances per step (2, 1), (3, 2),
    (4, 3): ratio of means 6 / 9 = 0.667 every seed."""
    folder = tmp_path_factory.mktemp("report") / "compare"
    for seed in range(3):
        _run(folder / "grpo" / "plain" / f"seed{seed}", seed, False, [0.3, 0.4, 0.5])
        _run(folder / "grpo" / "rcc" / f"seed{seed}", seed, True, [0.2, 0.4, 0.9])
    rows = [
        {"recipe": "grpo", "arm": "plain", "label": "GRPO", "seeds": [0, 1, 2],
         "after": _ci(0.6, 0.2484), "before": _ci(0.5, 0.0), "diff_vs_plain": None},
        {"recipe": "grpo", "arm": "rcc", "label": "GRPO + RCC", "seeds": [0, 1, 2],
         "after": _ci(0.65, 0.1242), "before": _ci(0.5, 0.0),
         "diff_vs_plain": _ci(0.05, 0.1242), "grad_var_ratio": _ci(2 / 3, 0.0)},
    ]  # fmt: skip
    report = {"metric": "held-out avg@4", "ci": "95% Student t interval over seeds",
              "difference": "paired by seed", "rows": rows, "failed": [],
              "grad_var": "ratio of means"}  # fmt: skip
    (folder / "results.json").write_text(json.dumps(report))
    return folder


@pytest.fixture(scope="module")
def compare_page(compare_folder: Path) -> Path:
    return write_report(compare_folder)


def test_rendered_compare_report_shows_the_rows_their_intervals_and_the_diagnostics(
    compare_page, tmp_path
):
    shown = _rendered(compare_page, tmp_path)
    results, grad_var, diagnostics = shown["tables"][:3]
    assert results == [
        ["method", "after RL (%)", "Δ vs plain (pp)", "SFT start (%)", "seeds"],
        ["GRPO", "60.0 ± 24.8 [35.2, 84.8]", "—", "50.0 ± 0.0 [50.0, 50.0]", "3"],
        ["GRPO + RCC", "65.0 ± 12.4 [52.6, 77.4]", "+5.0 ± 12.4 [-7.4, 17.4]",
         "50.0 ± 0.0 [50.0, 50.0]", "3"],
    ]  # fmt: skip
    assert grad_var[1] == ["GRPO + RCC", "0.667 ± 0.000 [0.667, 0.667]"]
    assert "Intervals: 95% Student t interval over seeds; Δ: paired by seed." in shown["text"]
    # one row per run; means over the 3 steps: plain reward 0.4, RCC reward 0.5,
    # rcc/cov (0 + 0.01 + 0.02) / 3 = 0.01, variances 3 and 2
    header = diagnostics[0]
    assert header[:3] == ["run", "steps", "reward"]
    by_run = {row[0]: dict(zip(header, row, strict=True)) for row in diagnostics[1:]}
    assert sorted(by_run) == [f"grpo/{arm}/seed{s}" for arm in ("plain", "rcc") for s in range(3)]
    assert by_run["grpo/plain/seed1"]["reward"] == "0.4"
    assert by_run["grpo/plain/seed1"]["rcc/cov"] == "–"
    rcc = by_run["grpo/rcc/seed2"]
    assert (rcc["steps"], rcc["reward"], rcc["rcc/cov"]) == ("3", "0.5", "0.01")
    assert (rcc["diag/grad_var_plain"], rcc["diag/grad_var_rcc"]) == ("3", "2")


def test_every_figure_of_the_report_decodes_in_the_browser(compare_page, tmp_path):
    page = compare_page
    images = _rendered(page, tmp_path)["images"]
    assert {i["alt"] for i in images} >= {"curves_grpo", "cov_grpo", "gradvar_grpo"}
    undecoded = [i for i in images if not (i["complete"] and min(i["width"], i["height"]) > 100)]
    assert undecoded == []
    # the probe can fail: a figure whose bytes are broken renders with no size
    broken = tmp_path / "broken.html"
    text = page.read_text(encoding="utf-8")
    head, _, tail = text.partition("data:image/png;base64,")
    broken.write_text(head + "data:image/png;base64," + base64.b64encode(b"x" * 64).decode()
                      + tail[tail.index("'"):])  # fmt: skip
    first = _rendered(broken, tmp_path)["images"][0]
    assert first["width"] == 0 and first["height"] == 0


def _coloured_pixels(png: Path) -> int:
    """Pixels whose channels differ by more than 60 (the figures' lines and markers; the
    page's text, borders and backgrounds are grey)."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    return sum(n for n, (r, g, b) in image.getcolors(1 << 24) if max(r, g, b) - min(r, g, b) > 60)


def test_screenshot_of_the_report_paints_the_figures(compare_page, tmp_path):
    page = compare_page
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path, "--hide-scrollbars", "--window-size=1200,2400",
                     f"--screenshot={shot}", page.as_uri())  # fmt: skip
    assert done.returncode == 0 and shot.stat().st_size > 0, done.stderr[-2000:]
    painted = _coloured_pixels(shot)
    # the same page with its figures removed paints no colour: the count is the figures'
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"<img [^>]*>", "", page.read_text(encoding="utf-8")))
    bare_shot = tmp_path / "bare.png"
    _chromium(tmp_path, "--hide-scrollbars", "--window-size=1200,2400",
              f"--screenshot={bare_shot}", bare.as_uri())  # fmt: skip
    assert _coloured_pixels(bare_shot) == 0
    assert painted > 1000, painted


def test_rendered_eval_report_shows_counts_intervals_and_the_source(tmp_path):
    # 3 problems x 4 samples, 0 + 1 + 4 = 5 correct: avg@4 = 5 / 12 = 0.417
    r = summarize("hand", [[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]], [[0] * 4] * 3)
    r.source = "/data/hand.jsonl"
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "results.json").write_text(
        json.dumps({"config": {"model": "m"}, "benchmarks": {"hand": r.to_json()}})
    )
    header, row = _rendered(write_report(folder), tmp_path)["tables"][0]
    assert header[:5] == ["benchmark", "problems", "n", "correct samples", "avg@n = pass@1"]
    assert row[:4] == ["hand", "3", "4", "5"]
    value, low, high = map(float, re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", row[4]).groups())
    assert value == 0.417 and low < value < high
    assert row[-1] == "/data/hand.jsonl"


def test_rendered_run_report_shows_the_counts_and_the_interval(tmp_path):
    folder = tmp_path / "run"
    _run(folder, 0, True, [0.25, 0.75])
    summary = json.loads((folder / "summary.json").read_text())
    summary |= {"eval_n": 1, "heldout_after": {
        "problems": 200, "samples": 200, "correct": 124, "avg_at_n": 0.62, "ci_low": 0.555,
        "ci_high": 0.69, "interval": "percentile bootstrap over problems"}}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    shown = _rendered(write_report(folder), tmp_path)
    rows = {row[0]: row[1] for row in shown["tables"][0]}
    assert rows["held-out avg@1 after RL"] == "0.620 [0.555, 0.690] (124/200 samples, 200 problems)"
    # this summary has no counts for the start: the page says so instead of an interval
    before = rows["held-out avg@1 before RL"]
    assert before == "0.500 (no counts or interval recorded by this run's code)"
    assert "Interval: 95% percentile bootstrap over problems." in shown["text"]
    assert shown["images"] and all(i["width"] > 100 for i in shown["images"])
