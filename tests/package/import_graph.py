"""The package's import graph read from the source with ``ast`` (every import, also those
inside functions): module -> the modules it imports, and each module's part (its
top-level subpackage or module under ``src/contrastive_rlvr``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "contrastive_rlvr"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(src: Path) -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports. ``from X import n``
    counts as an import of ``X.n`` where that is a module, else of ``X``."""
    paths = sorted((src / PACKAGE).rglob("*.py"))
    modules = {module_name(p, src): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith(PACKAGE):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    targets.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith(PACKAGE)}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def part_of(module: str) -> str:
    """``contrastive_rlvr.trainer.stages.bicc`` -> ``trainer``; the package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
