"""``contrastive-rlvr report``: one self-contained HTML page of a run, a compare folder or
an ``eval`` folder.

The page holds what the folder's own files hold, nothing recomputed differently:

- a compare folder (``results.json`` with ``rows``): compare's table (held-out avg@n
  after RL, the paired difference to the plain arm, the SFT start, each with its t
  interval over seeds, or the statement that one seed gives none), the RCC arms'
  gradient-variance ratio of means;
- a training run (``summary.json``): held-out avg@n before and after RL with the
  counts and Wilson interval summary.json records (runs from before the counts
  were recorded show the value alone, and say so);
- an eval folder (``results.json`` with ``benchmarks``): avg@n (= pass@1) and pass@k
  with their intervals, the counts and the file each benchmark was read from;
- the curves and diagnostics figures of :mod:`.plots`, embedded as base64 PNGs (no
  file or network reference: the page can be mailed or archived alone);
- a diagnostics table per run: mean over logged steps of the keys that say whether a
  method did anything (``rcc/cov``, the clip share, ``adv/collapse_rate``,
  ``bicc/context_tokens``, ``diag/*``), and below it what the terminal says: a run that
  learned nothing and why, a BiCC arm where BiCC never applied, and what a BiCC arm's
  clip share measures.
"""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from .metrics import CLIP_FRACTION_KEYS
from .stats import mean_text

#: metrics.jsonl keys of the diagnostics table (absent ones are left out).
DIAGNOSTIC_KEYS = (
    "reward",
    "reward/accuracy",
    "adv/collapse_rate",
    "rcc/cov",
    "rcc/baseline_shift",
    "bicc/context_tokens",
    "bicc/conditioned_frac",
    "bicc/transfer_cos",
    "bicc/distill_gap",
    *CLIP_FRACTION_KEYS,
    "diag/grad_var_plain",
    "diag/grad_var_rcc",
    "diag/ratio_margin",
    "loss/skipped_updates_total",
)

_STYLE = """
body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px}
th{background:#eee}td.num{text-align:right;font-family:monospace}img{max-width:100%}
p.note{color:#444;font-size:90%}
"""


def _esc(x: object) -> str:
    return html.escape(str(x))


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_esc(c)}</td>' for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _ci_text(ci: dict | None, scale: float = 100.0, signed: bool = False, digits: int = 1) -> str:
    """``78.1 ± 3.5 [74.6, 81.6]`` (scaled, ``digits`` decimals), or the value and "no
    interval (1 seed)"."""
    if ci is None:
        return "–"
    return mean_text(ci, scale=scale, digits=digits, signed=signed)


def _compare_section(report: dict) -> str:
    rows = [
        [
            row["label"],
            _ci_text(row["after"]),
            "—" if row["arm"] == "plain" else _ci_text(row["diff_vs_plain"], signed=True),
            _ci_text(row["before"]),
            len(row["seeds"]),
        ]
        for row in report["rows"]
    ]
    parts = [
        f"<h2>Results: {_esc(report['metric'])}</h2>",
        _table(["method", "after RL (%)", "Δ vs plain (pp)", "SFT start (%)", "seeds"], rows),
        f"<p class=note>Intervals: {_esc(report['ci'])}; Δ: {_esc(report['difference'])}.</p>",
    ]
    forms = [f"{r['label']}: {r['bicc_form']}" for r in report["rows"] if r.get("bicc_form")]
    if forms:
        parts.append(f"<p class=note>BiCC's form in each BiCC arm: {_esc('; '.join(forms))}.</p>")
    if report.get("no_interval"):
        parts.append(f"<p class=note>{_esc(report['no_interval'])}</p>")
    gv = [r for r in report["rows"] if r.get("grad_var_ratio")]
    if gv:
        # a ratio near 1: three decimals, as compare's results.md gives it
        gv_rows = [[r["label"], _ci_text(r["grad_var_ratio"], scale=1.0, digits=3)] for r in gv]
        parts += [
            "<h3>Gradient variance RCC / plain (ratio of means)</h3>",
            _table(["method", "ratio (mean ± t half-width [interval])"], gv_rows),
            f"<p class=note>{_esc(report.get('grad_var', ''))}</p>",
        ]
    if report.get("failed"):
        failed = ", ".join(f"{f['recipe']}/{f['arm']}/seed{f['seed']}" for f in report["failed"])
        parts.append(f"<p class=note>Failed runs: {_esc(failed)}</p>")
    return "\n".join(parts)


def _heldout_text(summary: dict, when: str) -> str:
    counts = summary.get(f"heldout_{when}")
    value = summary.get(f"heldout_avg@n_{when}")
    keys = ("heldout_avg@n_before", "heldout_avg@n_after")
    if all(k in summary and summary[k] is None for k in keys):  # heldout_size=0
        return "not scored (heldout_size=0: no held-out split)"
    if not counts:
        return f"{value:.3f} (no counts or interval recorded by this run's code)"
    return (
        f"{counts['avg_at_n']:.3f} [{counts['ci_low']:.3f}, {counts['ci_high']:.3f}] "
        f"({counts['correct']}/{counts['samples']} samples, {counts['problems']} problems)"
    )


def _run_section(summary: dict) -> str:
    rows = [
        ["recipe", summary.get("recipe")],
        ["BiCC / RCC", f"{summary.get('bicc')} / {summary.get('rcc')}"],
        ["seed", summary.get("seed")],
        ["steps", summary.get("steps")],
        [f"held-out avg@{summary.get('eval_n')} before RL", _heldout_text(summary, "before")],
        [f"held-out avg@{summary.get('eval_n')} after RL", _heldout_text(summary, "after")],
        ["skipped / rolled-back updates",
         f"{summary.get('skipped_updates')} / {summary.get('rolled_back_updates')}"],
    ]  # fmt: skip
    interval = (summary.get("heldout_after") or {}).get("interval")
    note = f"<p class=note>Interval: 95% {_esc(interval)}.</p>" if interval else ""
    return "<h2>Run</h2>" + _table(["", "value"], rows) + note + _signal_text(summary)


def _signal_text(summary: dict) -> str:
    """What the terminal said at the end of the run on whether it could learn (summary.json's
    ``learning_signal``): that it learned nothing, and each cause found."""
    signal = summary.get("learning_signal") or {}
    parts = []
    if signal.get("learned_nothing"):
        parts.append(f"<p><b>The run learned nothing</b>: {_esc(signal['learned_nothing'])}.</p>")
    causes = signal.get("causes") or {}
    if causes:
        items = "".join(f"<li>{_esc(k)}: {_esc(v)}</li>" for k, v in causes.items())
        parts.append(f"<p>Why the run may have learned nothing:</p><ul>{items}</ul>")
    return "".join(parts)


#: Under the diagnostics table when a BiCC arm clipped: what its clip share measures.
BICC_CLIP_NOTE = (
    "A BiCC arm's clip share is not a sign of a broken run: its conditioned rows are scored "
    "with the group's opposite attempts in the context, and in the 'paper' ratio mode "
    "(bicc_ratio_mode, the default of the clipped recipes) the ratio is pi(o | [q; O]) / "
    "pi_old(o | q); the context makes the model's own samples less likely (mean token "
    "ratio 0.19-0.32 on the embedded default), so about a third of the tokens fall below "
    "1 - eps_low from the first update on, while a plain arm, on-policy, clips none at its "
    "first update. The 'consistent' mode clips none there. docs/bicc.md, 'Ratio mode per "
    "recipe', has the measurements."
)


def _run_notes(runs: list, folder: Path) -> list[str]:
    """The sentences the diagnostics table needs: a run of a compare folder that learned
    nothing, a BiCC arm where BiCC never applied, and what a BiCC arm's clip share is."""
    notes, bicc_clipped = [], False
    for r in runs:
        name = f"{r.recipe}/{r.arm}/seed{r.seed}"
        nothing = ((r.summary or {}).get("learning_signal") or {}).get("learned_nothing")
        if nothing and r.path != folder:
            notes.append(f"{name} learned nothing: {nothing}.")
        if "bicc" not in r.arm:
            continue
        _, conditioned = r.series("bicc/conditioned_frac")
        if conditioned.size and not conditioned.any():
            _, collapse = r.series("adv/collapse_rate")
            why = f" (adv/collapse_rate {collapse.mean():.2f})" if collapse.size else ""
            notes.append(
                f"{name}: BiCC never applied: bicc/conditioned_frac was 0 at every logged "
                "step, so no row was scored with opposite attempts and the arm trained as "
                "plain; BiCC conditions a row only on its group's opposite attempts, which a "
                f"group whose completions were all right or all wrong lacks{why}."
            )
        _, clipped = r.series(CLIP_FRACTION_KEYS[0])
        bicc_clipped = bicc_clipped or bool(clipped.size and clipped.mean() > 0)
    if bicc_clipped:
        notes.append(BICC_CLIP_NOTE)
    return notes


def _eval_section(results: dict) -> str:
    ks = sorted({int(k) for b in results["benchmarks"].values() for k in b["pass_at_k"]} - {1})
    rows = []
    for name, b in results["benchmarks"].items():
        cis = b.get("intervals", {})

        def cell(value: float, ci: dict | None) -> str:
            return (
                f"{value:.3f}"
                if not ci
                else f"{value:.3f} [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]"
            )

        passes = [
            cell(b["pass_at_k"][str(k)], cis.get("pass_at_k", {}).get(str(k)))
            if str(k) in b["pass_at_k"]
            else ""
            for k in ks
        ]
        rows.append(
            [
                name,
                b["problems"],
                b["n"],
                b.get("correct", "–"),
                cell(b["avg_at_n"], cis.get("avg_at_n")),
                *passes,
                f"{b['unparsable']}/{b['samples']}",
                b.get("source") or "–",
            ]
        )
    method = next(
        (b["intervals"]["method"] for b in results["benchmarks"].values() if b.get("intervals")),
        None,
    )
    header = ["benchmark", "problems", "n", "correct samples", "avg@n = pass@1"]
    header += [f"pass@{k}" for k in ks] + ["unparsable", "read from"]
    note = "avg@n = pass@1 (the unbiased estimator at k = 1 is the mean of c_i / n)."
    if method:
        note += f" Intervals: 95% {method}."
    model = results.get("config", {}).get("model", "")
    return (
        f"<h2>Evaluation: {_esc(model)}</h2>"
        + _table(header, rows)
        + f"<p class=note>{_esc(note)}</p>"
    )


def _diagnostics_section(folder: Path) -> str:
    from .plots import NoRunFolders, find_runs

    try:
        runs = find_runs([folder])
    except NoRunFolders:
        return ""
    keys = [k for k in DIAGNOSTIC_KEYS if any(r.series(k)[0].size for r in runs)]
    if not keys:
        return ""
    rows = []
    for r in runs:
        cells = []
        for k in keys:
            _, values = r.series(k)
            cells.append(f"{values.mean():.4g}" if values.size else "–")
        rows.append([f"{r.recipe}/{r.arm}/seed{r.seed}", len(r.metrics), *cells])
    notes = "".join(f"<p>{_esc(n)}</p>" for n in _run_notes(runs, folder))
    return (
        "<h2>Diagnostics (mean over logged steps)</h2>"
        + _table(["run", "steps", *keys], rows)
        + "<p class=note>Definitions: docs/metrics.md. The clip share is "
        "clip_ratio/region_mean on either loss route.</p>"
        + notes
    )


def _figures_section(folder: Path) -> str:
    from .plots import NoRunFolders, find_runs, plot_runs

    try:
        find_runs([folder])
    except NoRunFolders:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        paths = plot_runs([folder], tmp, require_steps=False)
        images = [
            f"<h3>{_esc(p.stem)}</h3><img alt='{_esc(p.stem)}' src='data:image/png;base64,"
            f"{base64.b64encode(p.read_bytes()).decode('ascii')}'>"
            for p in paths
        ]
    return "<h2>Curves and diagnostics</h2>" + "\n".join(images) if images else ""


#: What a file of another tool or version can raise where a section reads it.
_READ_ERRORS = (KeyError, TypeError, AttributeError, IndexError, ValueError)


def _read_json(path: Path) -> object:
    from .run_files import read_json

    return read_json(path)  # a regular file, bounded, errors naming it


def _section(path: Path, kind: str, build, data: object) -> str:
    """``build(data)``; a file whose contents ``build`` cannot read (another tool's, or
    another version's) is one ``ValueError`` naming it, not a traceback."""
    try:
        if not isinstance(data, dict):
            raise TypeError(f"it holds a {type(data).__name__}, not a mapping")
        return build(data)
    except _READ_ERRORS as err:
        raise ValueError(
            f"{path} is not {kind} this version of contrastive-rlvr can read "
            f"({type(err).__name__}: {err})"
        ) from err


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write the HTML page of ``folder`` (a compare folder, a run or an eval folder) to
    ``out`` (default ``folder/report.html``); returns its path. A file in it that this
    version cannot read is a ``ValueError`` naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    results_file, summary_file = folder / "results.json", folder / "summary.json"
    results = _read_json(results_file) if results_file.exists() else None
    sections = []
    if isinstance(results, dict) and "rows" in results:
        sections.append(_section(results_file, "a compare results file", _compare_section, results))
    elif isinstance(results, dict) and "benchmarks" in results:
        sections.append(_section(results_file, "an eval results file", _eval_section, results))
    if summary_file.exists():
        summary = _read_json(summary_file)
        sections.append(_section(summary_file, "a run summary", _run_section, summary))
    figures, diagnostics = _figures_section(folder), _diagnostics_section(folder)
    if not sections and not figures:
        raise ValueError(
            f"{folder}: no results.json (compare or eval), summary.json or metrics.jsonl to "
            "report on"
        )
    sections += [diagnostics, figures]
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>contrastive-rlvr report: {_esc(folder.name)}</title><style>{_STYLE}</style>"
        f"</head><body><h1>{_esc(folder)}</h1>\n"
        + "\n".join(s for s in sections if s)
        + "\n</body></html>\n"
    )
    out = Path(out) if out is not None else folder / "report.html"
    # run_files: whole, umask mode, under the folder's lock; a link or a file no run
    # wrote at report.html is refused, never written through
    from .run_files import write_file

    return write_file(out.parent, out.name, page)
