"""GitOps checks: the manifests adapter of the Rego policies over many documents.

All documents go to OPA as one ``kind: List`` input in a single ``opa eval``; the
adapter reports each finding with the item's position, mapped back to file and
document here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from autoclusters.rego import opa
from autoclusters.rego.documents import Document
from autoclusters.rego.policy_data import PolicyConfig

QUERY = "data.autoclusters.manifests.violation"


@dataclass(frozen=True)
class Finding:
    source: str
    index: int
    item: int | None
    kind: str
    name: str
    rule: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_documents(docs: Sequence[Document], config: PolicyConfig, *, policies: Path | None = None) -> list[Finding]:
    """Every violation in ``docs``, in document order."""
    if not docs:
        return []
    # JSON round trip: YAML may hold dates or other non-JSON scalars; OPA sees them as strings.
    items = json.loads(json.dumps([d.obj for d in docs], default=_scalar))
    value = opa.evaluate(QUERY, {"apiVersion": "v1", "kind": "List", "items": items}, config.data_document(),
                         policies=policies)
    findings = []
    for v in value or []:
        doc = docs[int(v["item"])]
        findings.append(Finding(doc.source, doc.index, doc.item, doc.kind, doc.name, v["rule"], v["msg"]))
    findings.sort(key=lambda f: (f.source, f.index, f.item or 0, f.rule, f.message))
    return findings


def _scalar(value: Any) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)
