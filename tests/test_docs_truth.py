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

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
#: Commands whose unknown options are RLVRConfig fields (train's overrides, compare's).
CONFIG_COMMANDS = ("train", "compare")


def _recipe_table_names() -> list[str]:
    section = README.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)


def test_readme_recipe_table_names_only_recipes_the_cli_takes():
    names = _recipe_table_names()
    assert len(names) >= 6, names
    assert [n for n in names if n not in RECIPES] == []
    assert set(RECIPES) <= set(names)  # and every recipe has its row
    # a loss name in the table's text reads as a recipe: each must be one (gspo_token is not)
    from contrastive_rlvr.algorithms.losses import POLICY_LOSSES

    section = README.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| `")]
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
