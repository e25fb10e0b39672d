"""Rooms of a size one can read: no module of the package over 600 lines (the layout in
docs/architecture.md splits a module by concern before it gets there)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "contrastive_rlvr"
LIMIT = 600


def test_no_module_over_the_line_limit():
    sizes = {
        p.relative_to(SRC).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")
    }
    assert len(sizes) > 50  # the package was found
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
