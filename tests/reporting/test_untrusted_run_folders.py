"""``plot`` and ``report`` on folders they did not make: what a folder holds is data, never
a path (figure names built from a config's recipe stay in the figures folder), and a
folder of another tool or version is one ``error:`` line, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.plots import file_part, plot_runs

METRICS = [{"step": s, "reward": 0.1 * s, "reward/accuracy": 0.1 * s} for s in range(1, 6)]


def _run_folder(path: Path, config: object, metrics: list | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    rows = METRICS if metrics is None else metrics
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _one_line(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output


def test_a_recipe_with_a_path_in_it_names_a_file_in_the_figures_folder(tmp_path):
    # A shared folder's config.yaml says recipe "x/../../escaped"; the attacker also made
    # figures/curves_x/, so that curves_x/../../escaped.png resolves outside figures/.
    run = _run_folder(tmp_path / "shared" / "run", {"recipe": "x/../../escaped", "bicc": False,
                                                     "rcc": False, "seed": 0})  # fmt: skip
    figures = tmp_path / "shared" / "figures"
    (figures / "curves_x").mkdir(parents=True)
    written = plot_runs([run], figures)
    assert written and all(p.parent == figures and p.exists() for p in written)
    assert not (tmp_path / "shared" / "escaped.png").exists()
    assert not list(tmp_path.rglob("escaped.png"))
    assert [p.name for p in written] == [f"curves_{file_part('x/../../escaped')}.png"]


def test_file_part_keeps_plain_names_and_two_names_two_files():
    assert file_part("grpo") == "grpo" and file_part("dr_grpo") == "dr_grpo"
    assert file_part("bicc+rcc") == "bicc+rcc"
    for name in ("a/b", "../a", "a\\b", "..", "", "$x$", "a" * 500):
        part = file_part(name)
        assert "/" not in part and "\\" not in part and not part.startswith(".")
        assert len(part) <= 64
    assert file_part("a/b") != file_part("a_b") != file_part("a:b")


@pytest.mark.parametrize(
    ("config", "metrics", "message"),
    [
        ({"model": "other-tool", "lr": 0.1}, None, "its config has no str 'recipe' field"),
        (["a", "list"], None, "its config holds a list, not a mapping of fields"),
        ({"recipe": "grpo", "bicc": "yes", "rcc": False}, None, "no bool 'bicc' field"),
        ({"recipe": "grpo", "bicc": False, "rcc": False}, [{"loss": 1.0}],
         "metrics.jsonl row 1 is not a mapping with an integer step"),
        ({"recipe": "grpo", "bicc": False, "rcc": False}, [[1, 2]],
         "metrics.jsonl row 1 is not a mapping with an integer step"),
        ({"recipe": "grpo", "bicc": False, "rcc": False}, [{"step": 1, "reward": "high"}],
         "metrics.jsonl row 1: reward='high' is not a number"),
    ],
)  # fmt: skip
def test_plot_of_another_tools_folder_is_one_line(tmp_path, config, metrics, message):
    run = _run_folder(tmp_path / "run", config, metrics)
    _one_line(CliRunner().invoke(app, ["plot", str(run)]), message)


def test_plot_of_a_config_that_is_not_yaml_is_one_line(tmp_path):
    run = _run_folder(tmp_path / "run", {})
    (run / "config.yaml").write_text("recipe: [unclosed\n")
    _one_line(CliRunner().invoke(app, ["plot", str(run)]), "is not a run folder")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("results.json", "{not json", "results.json is not JSON"),
        ("results.json", json.dumps({"rows": [{"label": "x"}]}),
         "results.json is not a compare results file this version"),
        ("results.json", json.dumps({"benchmarks": {"b": {"n": 1}}}),
         "results.json is not an eval results file this version"),
        ("summary.json", json.dumps({"heldout_avg@n_before": None}),
         "summary.json is not a run summary this version"),
        ("summary.json", json.dumps([1, 2]), "summary.json is not a run summary"),
    ],
)  # fmt: skip
def test_report_of_another_tools_folder_is_one_line(tmp_path, name, text, message):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / name).write_text(text)
    _one_line(CliRunner().invoke(app, ["report", str(folder)]), message)
    assert not (folder / "report.html").exists()


def test_report_of_a_folder_with_a_broken_run_names_it(tmp_path):
    # It used to leave the figures and diagnostics out without a word.
    run = _run_folder(tmp_path / "run", {"recipe": "grpo", "bicc": False, "rcc": False},
                      [{"step": "one"}])  # fmt: skip
    (run / "summary.json").write_text(
        json.dumps(
            {"recipe": "grpo", "heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.5, "eval_n": 1}
        )  # fmt: skip
    )
    _one_line(CliRunner().invoke(app, ["report", str(run)]), "metrics.jsonl row 1")


def test_links_planted_where_plot_and_report_write_are_refused_not_followed(tmp_path):
    # A shared run folder holds report.html and figures/curves_grpo.png as symbolic links
    # to the user's own files: writing through them would overwrite those files. The one
    # way of writing (run_files) refuses a link in one line naming it, and leaves it.
    run = _run_folder(tmp_path / "run", {"recipe": "grpo", "bicc": False, "rcc": False})
    victim_page, victim_png = tmp_path / "notes.txt", tmp_path / "photo.png"
    victim_page.write_text("the user's notes\n")
    victim_png.write_text("the user's photo\n")
    (run / "report.html").symlink_to(victim_page)
    (run / "figures").mkdir()
    (run / "figures" / "curves_grpo.png").symlink_to(victim_png)
    _one_line(CliRunner().invoke(app, ["plot", str(run)]), "curves_grpo.png is a symbolic link")
    _one_line(CliRunner().invoke(app, ["report", str(run)]), "report.html is a symbolic link")
    assert victim_page.read_text() == "the user's notes\n"
    assert victim_png.read_text() == "the user's photo\n"
    for link in (run / "report.html", run / "figures" / "curves_grpo.png"):
        assert link.is_symlink()
    assert not list(run.rglob("*.tmp"))
