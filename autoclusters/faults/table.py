"""The docs' Xid tables, generated from the catalog and the bucket table (``docs/xid-catalog.md``).

``python -m autoclusters.faults.table > docs/xid-catalog.md`` (part of ``make manifests``);
tests/unit/test_xid_docs.py keeps the file equal to what this module renders.
"""

from __future__ import annotations

from autoclusters.faults.buckets import BUCKETS
from autoclusters.faults.catalog import Catalog, FaultClass, load_catalog


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


if __name__ == "__main__":
    print(render(load_catalog()), end="")
