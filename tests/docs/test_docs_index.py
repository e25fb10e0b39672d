"""The docs index links every page, and no page names an internal issue number."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> set[Path]:
    return {(page.parent / m).resolve() for m in LINK.findall(page.read_text())}


def test_docs_index_links_every_page() -> None:
    linked = _links(DOCS / "README.md")
    pages = {p.resolve() for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert sorted(p.name for p in pages - linked) == []


def test_results_index_links_every_results_page() -> None:
    results = DOCS / "results"
    linked = _links(results / "README.md")
    pages = {p.resolve() for p in results.glob("*.md") if p.name != "README.md"}
    pages |= {p.resolve() for p in results.glob("*/README.md")}
    assert sorted(str(p.relative_to(results)) for p in pages - linked) == []


def test_every_results_page_opens_with_where_it_was_measured() -> None:
    pages = [p for p in (DOCS / "results").glob("*.md") if p.name != "README.md"]
    pages += list((DOCS / "results").glob("*/README.md"))
    for page in pages:
        first_lines = page.read_text().split("\n")[:4]
        assert any(line.startswith("*Measured at ") for line in first_lines), page


def test_links_between_docs_resolve() -> None:
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} -> {target}"


def test_no_internal_issue_numbers_in_docs() -> None:
    pattern = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        hits = pattern.findall(page.read_text())
        assert hits == [], f"{page.relative_to(ROOT)}: {hits}"


def test_readme_install_extras_exist() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = re.findall(r'pip install -e "\.\[([a-z,]+)\]"', (ROOT / "README.md").read_text())
    assert named, "the README's install block names no extra"
    for group in named:
        for extra in group.split(","):
            assert extra in extras, extra
