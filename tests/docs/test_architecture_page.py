"""docs/architecture.md is true: every file it names is in the repository (and every page
the code cites), its hooks are the ones the trainer overrides, and "Adding a method",
walked on a throwaway option in a copy of the package, puts it where the page says."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from method_walkthrough import DEFAULT, OPTION, ROOT, VALUE, package_with_the_option

PAGE = (ROOT / "docs" / "architecture.md").read_text()
#: A file or folder the page names: a backticked path ending in .py or .md, or in "/".
NAMED = re.compile(r"`([\w./-]+(?:\.py|\.md|/))`")
#: A page the code cites: docs/<name>.md, or an upper-case name at the root (README.md).
CITED = re.compile(r"(?<![\w/.-])(docs/[\w-]+\.md|[A-Z][A-Z_]+\.md)")


def _section(title: str) -> str:
    return PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _repository_files() -> list[str]:
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        files += [(Path(folder) / n).relative_to(ROOT).as_posix() for n in names]
    return files


def test_every_file_the_page_names_is_in_the_repository():
    files = _repository_files()
    # "Adding a method"'s x.py, test_x.py, ...: the files a method X would add
    named = {n for n in NAMED.findall(PAGE) if not re.search(r"(^|[/_])x([._/]|$)", n)}
    assert len(named) > 40  # the scan reads the page
    missing = {
        name
        for name in named
        if not any(f == name or f.endswith("/" + name) or f"/{name}" in f"/{f}" for f in files)
    }
    assert missing == set()


def test_every_page_the_code_cites_is_in_the_repository():
    cited: dict[str, set[str]] = {}
    for folder in ("src", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in CITED.findall(path.read_text()):
                cited.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    assert "docs/algorithms.md" in cited and "README.md" in cited
    assert {name: where for name, where in cited.items() if not (ROOT / name).is_file()} == {}


def test_the_hooks_are_the_trainers_overrides():
    trl = pytest.importorskip("trl")
    from contrastive_rlvr.trainer.rlvr_trainer import RLVRTrainer

    overrides = {
        name: Path(inspect.getsourcefile(cls)).name
        for cls in RLVRTrainer.__mro__
        if cls.__module__.startswith("contrastive_rlvr")
        for name, value in vars(cls).items()
        if inspect.isfunction(value) and name != "__init__" and hasattr(trl.GRPOTrainer, name)
    }
    rows = re.findall(r"^\| `(\w+)` \| `([\w.]+)`", _section("The TRL hooks"), re.M)
    assert dict(rows) == overrides
    assert len(overrides) == 10 and "overrides ten methods" in PAGE


def _python(src: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


STAGE_OF_A_RUN = f"""
import sys
from contrastive_rlvr.trainer.config import RLVRConfig
from contrastive_rlvr.trainer.stages import RunFacts, build_stages

cfg = RLVRConfig(output_dir=sys.argv[1], report_to="none", num_generations=2, recipe="dr_grpo",
                 log_delta=False, max_completion_length=8, {OPTION}={VALUE})
pipeline = build_stages(cfg, RunFacts(None, 2, has_reference=False))["train"]
print(next(s.setting for s in pipeline.stages if s.name == "walkthrough"))
"""


def test_adding_a_method_walked_on_a_throwaway_option(tmp_path):
    pytest.importorskip("trl")
    steps = _section("Adding a method")
    for named in ("method_options/", "SHARED_GROUPS", "trainer/stages/build.py", "build_stages"):
        assert named in steps  # the files the walk edits are the page's
    src = package_with_the_option(tmp_path)
    fields = _python(src, "-m", "contrastive_rlvr.cli", "train", "--fields")
    row = next(line for line in fields.splitlines() if line.startswith(OPTION + " "))
    assert row.split()[1:3] == ["float", str(DEFAULT)]
    assert _python(src, "-c", STAGE_OF_A_RUN, str(tmp_path / "out")).strip() == str(VALUE)
