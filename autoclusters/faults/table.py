"""The docs' fault tables: the Xid tables, generated from the catalog and the bucket table
(``docs/xid-catalog.md``), and docs/detector.md's "Conditions" table, from the fault contract.

``python -m autoclusters.faults.table > docs/xid-catalog.md`` and ``python -m
autoclusters.faults.table --conditions docs/detector.md`` (part of ``make manifests``);
tests/unit/test_xid_docs.py and tests/unit/faults/test_contract.py keep the files equal to
what this module renders.
"""

from __future__ import annotations

from autoclusters import doc_tables
from autoclusters import names as n
from autoclusters.faults.buckets import BUCKETS
from autoclusters.faults.catalog import Catalog, FaultClass, load_catalog
from autoclusters.faults.contract import ROWS


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(catalog: Catalog) -> str:
    gpu = catalog.of_class(FaultClass.GPU)
    xids = sorted((e for e in gpu if e.code.isdigit()), key=lambda e: int(e.code))
    others = [e for e in gpu if not e.code.isdigit()]
    lines = [
        "# The Xid catalog",
        "",
        "<!-- Generated from autoclusters/faults/catalog.yaml and autoclusters/faults/buckets.py by",
        "     `python -m autoclusters.faults.table` (make manifests); tests/unit/test_xid_docs.py checks it. -->",
        "",
        "Every Xid of NVIDIA's Xid Catalog, with NVIDIA's resolution bucket (its \"Immediate Action\")",
        "and what this product does with it. Sources: " + "; ".join(catalog.sources[:1]) + ".",
        "`UNPUBLISHED` is ours: NVIDIA lists the code without a bucket. How a pool repairs a code",
        "whose action is `none`: [operations.md](operations.md#which-xids-repair-a-node).",
        "",
        "## Buckets",
        "",
        "<!-- buckets-table -->",
        "| bucket | severity | action | application or software | what NVIDIA asks, and what happens here |",
        "|---|---|---|---|---|",
    ]
    for bucket, rule in BUCKETS.items():
        lines.append(f"| `{bucket}` | {rule.severity} | {rule.action} | {'yes' if rule.application else 'no'} "
                     f"| {_cell(rule.meaning)} |")
    lines += ["", "## Codes", "", "<!-- xid-table -->", "| Xid | name | bucket | severity | action |",
              "|---|---|---|---|---|"]
    for e in xids + others:
        lines.append(f"| {e.code} | {_cell(e.name)} | `{e.bucket}` | {e.severity} | {e.action} |")
    return "\n".join(lines) + "\n"


def conditions_table() -> str:
    """docs/detector.md's "Conditions" table: every row with its example message."""
    default = n.Names()
    lines = ["| condition | status | reason | message |", "|---|---|---|---|"]
    shown = None
    for r in ROWS:
        ctype = r.condition.type_in(default)
        if ctype.startswith(default.prefix):
            ctype = "<Prefix>" + ctype.removeprefix(default.prefix)
        first = f"| `{ctype}` |" if ctype != shown else "| |"
        shown = ctype
        note = f" {r.note}" if r.note else ""
        lines.append(f"{first} {r.status} | `{r.reason}` | `{r.render(**r.example)}`{note} |")
    return "\n".join(lines)


CONDITIONS_MARKER = "<!-- conditions-table"


def with_conditions_table(text: str) -> str:
    """``text`` (docs/detector.md) with the table after its marker line replaced by ``conditions_table``."""
    return doc_tables.with_table(text, CONDITIONS_MARKER, conditions_table())


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--conditions"]:  # make manifests: ... --conditions docs/detector.md
        doc_tables.rewrite(sys.argv[2], CONDITIONS_MARKER, conditions_table())
    else:
        print(render(load_catalog()), end="")
