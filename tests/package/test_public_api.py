"""The public API: the names the README and the examples use come from the package itself,
importing the package loads neither torch nor TRL, and the examples use public names only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import contrastive_rlvr

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_start_names_import_from_the_package():
    from contrastive_rlvr import RECIPES, MathVerifyReward, RLVRConfig, RLVRTrainer, train
    from contrastive_rlvr.algorithms import registry
    from contrastive_rlvr.rewards.math_verify import MathVerifyReward as Defined
    from contrastive_rlvr.run.command import train as defined_train
    from contrastive_rlvr.trainer.config import RLVRConfig as DefinedConfig
    from contrastive_rlvr.trainer.rlvr_trainer import RLVRTrainer as DefinedTrainer

    # the same objects as where they are defined, not copies
    assert RLVRConfig is DefinedConfig and RLVRTrainer is DefinedTrainer
    assert train is defined_train and MathVerifyReward is Defined
    assert RECIPES is registry.RECIPES and "grpo" in RECIPES


def test_every_public_name_resolves_and_is_listed():
    public = set(contrastive_rlvr.__all__) - {"__version__"}
    assert public == set(contrastive_rlvr._PUBLIC)
    for name in sorted(public):
        assert getattr(contrastive_rlvr, name) is not None, name
    assert public <= set(dir(contrastive_rlvr))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'RLVRTrainr'"):
        contrastive_rlvr.RLVRTrainr  # noqa: B018
    with pytest.raises(ImportError):
        from contrastive_rlvr import RLVRTrainr  # noqa: F401


def test_importing_the_package_and_the_cli_loads_neither_torch_nor_trl():
    # A fresh interpreter: this one has imported torch already.
    code = (
        "import sys, contrastive_rlvr, contrastive_rlvr.cli\n"
        "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))"
    )
    src = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _package_imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("contrastive_rlvr"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("contrastive_rlvr")]
    return found


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_examples_import_only_public_names(example):
    imports = _package_imports(example)
    assert imports, f"{example.name} imports nothing from contrastive_rlvr"
    for module, names in imports:
        assert module == "contrastive_rlvr", f"{example.name} imports the internal {module}"
        assert set(names) <= set(contrastive_rlvr.__all__), names
