"""One name per thing (issue 35): a set of choices is written once, as a ``Literal``, and
a tuple of the same choices is read from it (``get_args``), never spelled out again."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "contrastive_rlvr"


def _strings(node: ast.AST) -> frozenset[str] | None:
    """The strings of a tuple (or of one ``Literal[...]`` subscript) of str constants."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    if all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return frozenset(i.value for i in items)  # type: ignore[attr-defined]
    return None


def _module_sets(path: Path) -> tuple[dict[str, frozenset], dict[str, frozenset]]:
    """The module-level ``X = Literal[...]`` and tuple-of-strings assignments of a file."""
    literals, tuples = {}, {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        name, value = f"{path.relative_to(PACKAGE)}:{ast.unparse(target)}", node.value
        if isinstance(value, ast.Subscript) and ast.unparse(value.value) == "Literal":
            literals[name] = _strings(value.slice)
        elif isinstance(value, ast.Tuple) and len(value.elts) > 1 and _strings(value):
            tuples[name] = _strings(value)
    return literals, tuples


def test_no_set_of_choices_is_written_both_as_a_literal_and_as_a_tuple():
    literals, tuples = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found_literals, found_tuples = _module_sets(path)
        literals.update(found_literals)
        tuples.update(found_tuples)
    assert len(literals) >= 20  # the scan reads the package
    twice = {t: [n for n, s in literals.items() if s == v] for t, v in tuples.items()}
    assert {t: names for t, names in twice.items() if names} == {}


def test_framing_has_one_default():
    """The context budget's ``framing`` defaults to one value wherever it is taken: the
    functions of ``algorithms/bicc.py``, the rows' builder, the stage and the config."""
    import inspect

    from contrastive_rlvr.algorithms import bicc, bicc_rows
    from contrastive_rlvr.method_options import BiCCFields
    from contrastive_rlvr.trainer.stages.bicc import ConditionedPrompts

    functions = (bicc.context_plan, bicc.build_context, bicc.build_bicc_prompts)
    found = {inspect.signature(f).parameters["framing"].default for f in functions}
    found.add(inspect.signature(ConditionedPrompts).parameters["framing"].default)
    found.add(bicc_rows.BiCCRowBuilder.__dataclass_fields__["framing"].default)
    found.add(BiCCFields.__dataclass_fields__["bicc_framing_budget"].default)
    assert found == {bicc.DEFAULT_FRAMING} == {"outside"}
