"""Shared output helpers: readable tables and ``-o json`` for every command."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def add_output_flag(parser: Any) -> None:
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table",
                        help="output format (default: table)")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up at the call: a redirected (or captured) stdout is the one written
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def print_json(data: Any, out: TextIO | None = None) -> None:
    """The document in one write. ``json.dump`` writes it piece by piece, and with stdout
    unbuffered (the image sets PYTHONUNBUFFERED) a log line on stderr, which shares the
    container's log, could land inside the document and make it unreadable."""
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    out.flush()
