"""A generated table inside a hand-written docs page: the table after a marker line, replaced.

A page marks the table with an HTML comment line (``<!-- pool-settings-table: written by ...
-->``) directly above it; ``make manifests`` rewrites the table, and a unit test checks the
page is what rewriting gives (``pool_fields.py``'s settings, ``faults/contract.py``'s conditions).

Plumbing (rank 0): it imports nothing of the package.
"""

from __future__ import annotations

from pathlib import Path


def with_table(text: str, marker: str, table: str) -> str:
    """``text`` with the table after its ``marker`` line replaced by ``table``."""
    head, found, rest = text.partition(marker)
    if not found:
        raise ValueError(f"no {marker} line")
    marker_line, _, body = rest.partition("\n")
    lines = body.split("\n")
    table_end = next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))
    return head + marker + marker_line + "\n" + table + "\n" + "\n".join(lines[table_end:])


def rewrite(page: str, marker: str, table: str) -> None:
    """``page`` (a file) with its table rewritten (``make manifests``)."""
    doc = Path(page)
    doc.write_text(with_table(doc.read_text(), marker, table))
