"""docs/architecture.md's "Adding a method", steps 2 to 4, walked on a throwaway option in a
copy of the package: the option is one field of a ``method_options`` group, a stage takes it
as a setting and ``build_stages`` switches the stage on. The tests then look for it where
the page says it appears (``train --fields``, the stage, verl's config)."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "contrastive_rlvr"
#: The throwaway option, its default and the value a run sets.
OPTION, DEFAULT, VALUE = "rcc_walkthrough", 0.25, 0.75

FIELD = f"""    {OPTION}: float = field(
        default={DEFAULT}, metadata={{"help": "A throwaway option (docs/architecture.md)."}}
    )

"""
STAGE = '''"""A throwaway stage (tests/method_walkthrough.py)."""


class Walkthrough:
    name = "walkthrough"
    reads = ("rewards",)
    writes = ("shared.walkthrough",)

    def __init__(self, setting: float) -> None:
        self.setting = setting

    def __call__(self, batch, ctx):
        batch.shared["walkthrough"] = self.setting
        return batch
'''
#: The edits the page's steps name: (file under the package, the line the edit goes before
#: or replaces, the text).
SWITCH = "    stages += _loss_input_stages(cfg, facts, recipe.scale_by_std)\n"


def _insert(path: Path, before: str, text: str) -> None:
    source = path.read_text()
    assert source.count(before) == 1, f"{path}: the walk's anchor {before!r} moved"
    path.write_text(source.replace(before, text + before))


def package_with_the_option(tmp: Path) -> Path:
    """A copy of the package with steps 2-4 done; returns the folder to put on the path."""
    src = tmp / "src"
    shutil.copytree(PACKAGE, src / "contrastive_rlvr", ignore=shutil.ignore_patterns("__pycache__"))
    copy = src / "contrastive_rlvr"
    # Step 2: the option, once, in its method's group of method_options/.
    _insert(copy / "method_options" / "rcc.py", "    def check_rcc_fields(", FIELD)
    # Step 3: the stage, its setting a constructor argument.
    (copy / "trainer" / "stages" / "walkthrough.py").write_text(STAGE)
    # Step 4: switched on in build_stages, at its place in the order.
    build = copy / "trainer" / "stages" / "build.py"
    _insert(build, SWITCH, f"    stages.append(Walkthrough(cfg.{OPTION}))\n")
    _insert(build, "from .verigate import", "from .walkthrough import Walkthrough\n")
    return src
