"""The catalog's buckets and actions, the API's enums, the CRD and the docs' Xid tables are one."""

from __future__ import annotations

import re
from pathlib import Path

from autoclusters.api import CatalogAction, RepairAction, XidBucket
from autoclusters.deploy.crds import pool_schema
from autoclusters.faults.buckets import BUCKETS
from autoclusters.faults.catalog import FaultClass, load_catalog
from autoclusters.faults.table import render

DOC = Path(__file__).parents[2] / "docs" / "xid-catalog.md"


def test_the_docs_xid_catalog_is_the_one_the_catalog_renders() -> None:
    assert DOC.read_text() == render(load_catalog()), "regenerate: python -m autoclusters.faults.table"


def test_every_bucket_has_one_rule_and_the_docs_list_each_once() -> None:
    assert set(BUCKETS) == set(XidBucket)
    listed = re.findall(r"^\| `([A-Z0-9_]+)` \|", DOC.read_text().split("<!-- buckets-table -->")[1]
                        .split("\n## ")[0], re.M)
    assert listed == [b.value for b in XidBucket]


def test_the_docs_code_table_says_what_the_catalog_says() -> None:
    table = DOC.read_text().split("<!-- xid-table -->")[1]
    row = re.compile(r"^\| (\w+) \| .* \| `(\w+)` \| (\w+) \| (\w+) \|$", re.M)
    rows = {m[0]: (m[1], m[2], m[3]) for m in row.findall(table)}
    cat = load_catalog()
    gpu = cat.of_class(FaultClass.GPU)
    assert set(rows) == {e.code for e in gpu}
    for e in gpu:
        assert rows[e.code] == (str(e.bucket), str(e.severity), str(e.action)), e.code


def test_the_crd_names_the_repair_actions_a_pool_may_ask_for_by_code() -> None:
    repair_codes = pool_schema()["properties"]["spec"]["properties"]["repairCodes"]
    assert repair_codes["additionalProperties"]["enum"] == [a.value for a in RepairAction]
    # every catalog action that repairs is one a pool may name, and only none is not
    assert {a.value for a in CatalogAction} - {a.value for a in RepairAction} == {CatalogAction.NONE.value}
    assert {rule.action for rule in BUCKETS.values()} <= set(CatalogAction)
