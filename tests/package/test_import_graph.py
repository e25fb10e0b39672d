"""The floor plan of docs/architecture.md ("The package layout") held against the source:
every part is in the table, imports exactly the parts its row names, each on a lower floor
(so no part imports a sibling and the parts form no circle), and no two modules import each
other in a circle, counting the imports inside functions too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from import_graph import PACKAGE, cycles, import_graph, module_name, part_of

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
ROW = re.compile(r"^\| (\d+) \| `(\w+)` \| [^|]+ \| ([^|]+) \|$", re.M)


def documented_floors() -> dict[str, tuple[int, set[str]]]:
    """part -> (floor, the parts it imports) from the layout table of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The package layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for floor, part, imports in ROW.findall(section):
        assert part not in rows, f"{part} has two rows"
        rows[part] = (int(floor), set(re.findall(r"`(\w+)`", imports)))
    return rows


def part_imports() -> dict[str, set[str]]:
    """part -> the other parts its modules import (the package's face left out)."""
    out: dict[str, set[str]] = {}
    for module, targets in import_graph(SRC).items():
        part = part_of(module)
        if part:
            out.setdefault(part, set()).update(part_of(t) for t in targets)
    return {part: targets - {part, ""} for part, targets in out.items()}


def test_the_table_is_read():
    rows = documented_floors()
    assert rows["algorithms"] == (1, set()) and rows["cli"][0] == max(f for f, _ in rows.values())
    assert len(rows) >= 20


def test_every_part_has_one_row():
    assert sorted(documented_floors()) == sorted(part_imports())


def test_each_part_imports_what_its_row_says():
    rows = documented_floors()
    wrong = {
        part: {"code": sorted(targets), "docs": sorted(rows[part][1])}
        for part, targets in part_imports().items()
        if part in rows and targets != rows[part][1]
    }
    assert wrong == {}


def test_each_import_goes_to_a_lower_floor():
    rows = documented_floors()
    upward = []
    for module, targets in sorted(import_graph(SRC).items()):
        part = part_of(module)
        for target in sorted(targets):
            other = part_of(target)
            if part and other and other != part and rows[other][0] >= rows[part][0]:
                upward.append(f"{module} (floor {rows[part][0]}) -> {target} "
                              f"(floor {rows[other][0]})")  # fmt: skip
    assert upward == []


def test_lower_floors_take_values_not_the_run_config():
    """A part below the trainer takes the fields it needs, typed: no function there takes a
    ``config`` or ``cfg`` untyped or typed ``Any`` (the run config read by its field names,
    a coupling to the floor above that no import shows)."""
    rows = documented_floors()
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        module = module_name(path, SRC)
        if not part_of(module) or rows[part_of(module)][0] >= rows["trainer"][0]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                found += [f"{module}.{node.name}({a.arg})" for a in args if _run_config(a)]
    assert found == []


def _run_config(arg: ast.arg) -> bool:
    untyped = arg.annotation is None or ast.unparse(arg.annotation) == "Any"
    return arg.arg in ("config", "cfg") and untyped


def test_no_modules_import_each_other_in_a_circle():
    assert cycles(import_graph(SRC)) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_lazy_and_relative_imports_are_read(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("from .deep import x\n")
    (pkg / "inner" / "deep.py").write_text("def f():\n    from ..top import y\n")
    (pkg / "top.py").write_text("y = 1\n")
    graph = import_graph(tmp_path)
    assert graph[f"{PACKAGE}.inner.deep"] == {f"{PACKAGE}.top"}
    assert graph[f"{PACKAGE}.inner"] == {f"{PACKAGE}.inner.deep"}
