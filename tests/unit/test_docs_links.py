"""The repository stands alone: its docs and code send a reader only to files it has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRS = ("autoclusters", "components", "policies", "tests", "tools", "benchmarks", "examples", "docs")
# Spelled in pieces so this file does not match itself.
OUTSIDE = re.compile(r"\.\./" + "shared|\\b" + "SP" + "EC\\b|" + "TEST" + "ENV")


def _files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "pyproject.toml"]
    for d in DIRS:
        out += [p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".rego", ".sh", ".yaml"}]
    return out


def test_nothing_points_outside_the_repository() -> None:
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _files() for i, line in enumerate(p.read_text().splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == [], "the project's own docs (docs/contract.md) are the reference"


def test_relative_markdown_links_resolve() -> None:
    broken = []
    for p in _files():
        if p.suffix != ".md":
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if not target.startswith(("http://", "https://", "mailto:")) and not (p.parent / target).exists():
                broken.append(f"{p.relative_to(ROOT)} -> {target}")
    assert broken == []
