"""What a reader sees is true today: the README's recipe names and CLI flags exist, every
metric key docs/metrics.md documents is one the code (or TRL's trainer) logs, and every
benchmarks/ script the docs invoke starts and parses its options (``--help``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from transformers import HfArgumentParser

from contrastive_rlvr.algorithms import RECIPES
from contrastive_rlvr.cli import app
from contrastive_rlvr.trainer import RLVRConfig

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
#: Commands whose unknown options are RLVRConfig fields (train's overrides, compare's,
#: premise's).
CONFIG_COMMANDS = ("train", "compare", "premise")


def _methods_section() -> str:
    return README.split("## Methods", 1)[1].split("\n## ", 1)[0]


def _recipe_table_names() -> list[str]:
    return re.findall(r"^\| `--recipe ([a-z_]+)` \|", _methods_section(), flags=re.M)


def test_readme_recipe_table_names_only_recipes_the_cli_takes():
    names = _recipe_table_names()
    assert len(names) >= 6, names
    assert [n for n in names if n not in RECIPES] == []
    assert set(RECIPES) <= set(names)  # and every recipe has its row
    # a loss name in the table's text reads as a recipe: each must be one (gspo_token is not)
    from contrastive_rlvr.algorithms.losses import POLICY_LOSSES

    table = [line for line in _methods_section().splitlines() if line.startswith("| `")]
    named = {w for line in table for w in re.findall(r"`([a-z_]+)`", line)}
    assert sorted((named & set(POLICY_LOSSES)) - set(RECIPES)) == []


def _command_flags() -> dict[str, set[str]]:
    group = typer.main.get_command(app)
    config_flags = {
        opt for action in HfArgumentParser(RLVRConfig)._actions for opt in action.option_strings
    }
    flags = {}
    for name, command in group.commands.items():
        opts = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        flags[name] = opts | (config_flags if name in CONFIG_COMMANDS else set())
    return flags


def _invocations(text: str) -> list[tuple[str, list[str]]]:
    """``contrastive-rlvr CMD ...`` command lines (backslash continuations joined) and the
    ``--flags`` each passes."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for match in re.finditer(r"contrastive-rlvr ([a-z]+)((?: [^\n`|#]*)?)", joined):
        flags = re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", match.group(2))
        found.append((match.group(1), flags))
    return found


def test_readme_cli_invocations_use_commands_and_flags_that_exist():
    flags = _command_flags()
    wrong = []
    for command, used in _invocations(README):
        if command not in flags:
            wrong.append(f"contrastive-rlvr {command}: no such command")
            continue
        wrong += [f"contrastive-rlvr {command} {f}" for f in used if f not in flags[command]]
    assert wrong == []


#: Flags the README names as refused (an example of a prefix): they must not exist.
README_REFUSED_FLAGS = {"--max_step"}


def test_readme_flags_in_prose_exist_somewhere():
    known = set().union(*_command_flags().values())
    prose = set(re.findall(r"`(--[a-z][\w-]*)", README))
    assert sorted(prose - known - README_REFUSED_FLAGS) == []
    assert not README_REFUSED_FLAGS & known


def _documented_metric_keys() -> list[str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    body = text.split("## `metrics.jsonl`", 1)[1].split("\n## ", 1)[0]
    keys = []
    for cell in re.findall(r"^\| ([^|]+) \|", body, flags=re.M):
        keys += re.findall(r"`([a-z_]+(?:/[\w<>*]+)*)`", cell)
    return [k for k in keys if k not in ("key",)]


def _code_text() -> str:
    import trl.trainer.grpo_trainer as grpo

    sources = [p.read_text() for p in (ROOT / "src").rglob("*.py")]
    return "\n".join([*sources, Path(grpo.__file__).read_text()])


def test_each_documented_metric_key_is_one_the_code_logs():
    keys = _documented_metric_keys()
    assert "rcc/cov" in keys and "clip_ratio/region_mean" in keys  # the parse found the tables
    code = _code_text()
    missing = []
    for key in keys:
        prefix = re.split(r"[<*]", key)[0]
        if key != prefix:  # verigate/*, timing_s/<stage>: some key logged under the prefix
            ok = re.search(rf'["\']{re.escape(prefix)}', code) is not None
        else:
            # the full key as a literal, or its last part in an f-string under its prefix
            head, _, tail = key.rpartition("/")
            ok = (
                re.search(rf'["\']{re.escape(key)}["\']', code) is not None
                or (bool(head) and re.search(rf'{re.escape(head)}/\{{[^}}]*\}}', code) is not None
                    and re.search(rf'["\']{re.escape(tail)}["\']', code) is not None)
            )  # fmt: skip
        if not ok:
            missing.append(key)
    assert missing == []


def _invoked_scripts() -> list[str]:
    scripts = set()
    for text in DOCS.values():
        scripts |= set(re.findall(r"(?:python|bash) (benchmarks/[\w/]+\.(?:py|sh))", text))
    return sorted(scripts)


#: Runs each documented python script with --help in one interpreter (imports shared, so
#: the check stays cheap); prints one line per script: OK or what went wrong.
_DRIVER = r"""
import contextlib, io, runpy, sys
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
        print(script, "NO-EXIT")
    except SystemExit as e:
        ok = e.code in (0, None) and "usage" in out.getvalue().lower()
        print(script, "OK" if ok else f"EXIT {e.code}")
    except BaseException as e:
        print(script, "RAISED", type(e).__name__, str(e)[:200])
"""


def test_each_benchmarks_script_the_docs_invoke_starts_and_parses_its_options():
    scripts = _invoked_scripts()
    assert "benchmarks/real_model_figure.py" in scripts and len(scripts) >= 10
    missing = [s for s in scripts if not (ROOT / s).is_file()]
    assert missing == []
    for sh in (s for s in scripts if s.endswith(".sh")):
        assert subprocess.run(["bash", "-n", str(ROOT / sh)], check=False).returncode == 0, sh
    python = [s for s in scripts if s.endswith(".py")]
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, *python], cwd=ROOT, capture_output=True, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("benchmarks/")]
    assert len(lines) == len(python), done.stderr[-2000:]
    assert [line for line in lines if not line.endswith(" OK")] == []


@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_recipe_table_parse_is_not_vacuous(name):
    assert name in _recipe_table_names()


def test_formula_reference_is_inside_the_repository_and_names_every_recipe():
    assert "../shared/" not in README  # nothing a clone lacks
    text = (ROOT / "docs" / "algorithms.md").read_text()
    assert "(docs/algorithms.md)" in README
    for name in RECIPES:
        assert f"`{name}`" in text, name
    # the defaults it states are the code's
    from contrastive_rlvr.algorithms.losses import POLICY_LOSSES

    for name in ("grpo", "dr_grpo", "dapo", "gspo", "gmpo"):
        spec = POLICY_LOSSES[name].defaults
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.split("|")]
        clip = [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", cells[3])]
        assert clip == pytest.approx([spec["clip_low"], spec["clip_high"]]), (name, row)
        assert float(cells[5]) == pytest.approx(RECIPES[name].beta), (name, row)


# ------------------------------------------------------------- measured numbers carry a commit

#: A commit as the docs cite one: 7-40 hex digits with a letter and a digit among them.
_HEX = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40})(?![\w-])")
#: A table cell that quotes a measured number: two or more decimals, or an interval.
_MEASURED_CELL = re.compile(r"[-+]?\d+\.\d{2,}|±|\+-")
#: The command that produced a results folder.
_COMMAND = re.compile(
    r"contrastive-rlvr [a-z]+|python (?:-m \S+|\S*benchmarks/\S+)|bash (?:benchmarks|docs/results)/"
)
#: Tables of settings, not measurements (their numbers are defaults the code holds): the
#: page and the table's first header cell.
SETTINGS_TABLES = {
    ("docs/algorithms.md", "recipe"): "each recipe's ratio, clip range, aggregation and beta",
    ("docs/trl-parity.md", "recipe"): "the TRL fields each recipe fills",
    ("docs/scale-out.md", "recipe"): "the verl settings of each recipe",
}


def _git_commits(text: str) -> set[str]:
    """The hex strings of ``text`` that name a commit of this repository."""
    found = sorted({h for h in _HEX.findall(text) if re.search("[a-f]", h) and re.search(r"\d", h)})
    if not found:
        return set()
    done = subprocess.run(
        ["git", "cat-file", "--batch-check"], input="".join(f"{h}^{{commit}}\n" for h in found),
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {
        h for h, line in zip(found, done.stdout.splitlines(), strict=True) if " commit " in line
    }


@pytest.fixture(scope="module")
def git_checkout() -> None:
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True,
                      check=False).returncode != 0:  # fmt: skip
        pytest.skip("not a git checkout: the commits the docs cite cannot be looked up")


def _outside_fences(lines: list[str]) -> list[bool]:
    inside, keep = False, []
    for line in lines:
        if line.startswith("```"):
            inside = not inside
        keep.append(not inside and not line.startswith("```"))
    return keep


def _measured_tables(text: str) -> list[tuple[int, str, str]]:
    """Each markdown table with two or more rows quoting measured numbers (outside code
    fences): its first line, its first header cell, and the text that must name its commit:
    its section with the subsections, and the lead text of every enclosing section."""
    lines = text.splitlines()
    keep = _outside_fences(lines)
    heads = [(i, len(m.group(1))) for i, line in enumerate(lines)
             if keep[i] and (m := re.match(r"(#{1,6}) ", line))]  # fmt: skip
    tables, start = [], None
    for i, line in enumerate([*lines, ""]):
        is_row = i < len(lines) and keep[i] and line.startswith("|")
        if is_row and start is None:
            start = i
        elif not is_row and start is not None:
            tables.append((start, lines[start:i]))
            start = None
    found = []
    for start, rows in tables:
        body = rows[2:]
        if sum(any(_MEASURED_CELL.search(c) for c in r.split("|")[2:]) for r in body) < 2:
            continue
        enclosing = [h for h in heads if h[0] < start]
        own = enclosing[-1] if enclosing else (0, 1)
        end = next((i for i, lvl in heads if i > own[0] and lvl <= own[1]), len(lines))
        scope, level = lines[own[0] : end], own[1]
        for i, lvl in reversed(enclosing[:-1]):
            if lvl < level:  # an ancestor: its text up to its first subheading
                scope += lines[i : next(j for j, _ in heads if j > i)]
                level = lvl
        header = rows[0].split("|")[1].strip()
        found.append((start + 1, header, "\n".join(scope)))
    return found


def _docs_pages() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md"))


def test_each_docs_table_of_measured_numbers_names_the_commit_it_was_measured_at(git_checkout):
    missing, tables = [], 0
    for page in _docs_pages():
        name = str(page.relative_to(ROOT))
        for line, header, scope in _measured_tables(page.read_text()):
            if (name, header) in SETTINGS_TABLES:
                continue
            tables += 1
            if not _git_commits(scope):
                missing.append(f"{name}:{line}")
    assert tables >= 10  # the scan finds the pages' tables
    assert missing == [], "tables with no commit in their section:\n" + "\n".join(missing)


def _results_readmes() -> list[Path]:
    """Every results page (the folders' READMEs; the top README is the index of them)."""
    top = ROOT / "docs" / "results" / "README.md"
    return sorted(p for p in (ROOT / "docs" / "results").rglob("README.md") if p != top)


def test_each_results_folder_names_its_command_and_a_commit(git_checkout):
    results = ROOT / "docs" / "results"
    wrong = []
    for readme in _results_readmes():
        text = readme.read_text()
        if not _COMMAND.search(text):
            wrong.append(f"{readme.relative_to(ROOT)}: no command")
        if not _git_commits(text):
            wrong.append(f"{readme.relative_to(ROOT)}: no commit of this repository")
    # every folder of results has a README: its own, a parent's below docs/results, or the
    # top README's when that one links the folder
    top = (results / "README.md").read_text()
    for folder in sorted({p.parent for p in results.rglob("*") if p.is_file()} - {results}):
        below = [d for d in [folder, *folder.parents] if results in d.parents]
        if not any((d / "README.md").exists() for d in below) and f"]({below[-1].name}/" not in top:
            wrong.append(f"{folder.relative_to(ROOT)}: no README.md naming its command")
    assert len(_results_readmes()) >= 5
    assert wrong == [], "\n".join(wrong)


def test_the_measured_table_scan_is_not_vacuous():
    # a table under a heading whose section names no commit is found; a settings-like
    # table with one measured row is not; a commit in the parent's lead text counts
    text = (
        "# P\nmeasured at 9c1352a\n## A\n| x | y |\n|---|---|\n| a | 0.123 |\n| b | 1.5 ± 0.2 |\n"
        "## B\n| x | y |\n|---|---|\n| a | 0.123 |\n| b | 2 |\n"
        "```\n| not | a table |\n```\n"
    )
    found = _measured_tables(text)
    assert [(line, header) for line, header, _ in found] == [(4, "x")]
    assert "9c1352a" in found[0][2]
