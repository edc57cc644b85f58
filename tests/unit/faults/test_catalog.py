"""The shipped fault catalog loads, follows its schema, and the schema is strict."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoclusters.api import CatalogAction, XidBucket
from autoclusters.faults.buckets import APPLICATION_BUCKETS, BUCKETS
from autoclusters.faults.catalog import CatalogError, FaultClass, Severity, load_catalog, parse_catalog
from tests.conftest import known_fault


def minimal(**extra: object) -> dict[str, object]:
    return {"version": 1, "unknown": {fc.value: {"action": "none", "severity": "fatal"} for fc in FaultClass},
            "classes": {"gpu": [{"code": 79, "name": "off the bus", "bucket": "RESTART_BM"}],
                        "nvswitch": [{"code": 24007, "name": "SOE", "severity": "fatal", "action": "reset"}]},
            **extra}


def test_the_shipped_catalog_loads_and_covers_every_class() -> None:
    cat = load_catalog()
    for fc in FaultClass:
        assert cat.of_class(fc), f"no {fc} entries"
    assert cat.sources and any("analyzing-xid-catalog" in s for s in cat.sources)
    assert known_fault(cat, "gpu", 79).name == "GPU has fallen off the bus"
    assert known_fault(cat, "gpu", 79).severity == Severity.FATAL


def test_every_xid_of_nvidias_catalog_is_listed_with_a_bucket() -> None:
    """NVIDIA's Xid Catalog (Ampere and newer) lists codes 1 to 172; each is here with its bucket."""
    cat = load_catalog()
    for code in range(1, 173):
        assert known_fault(cat, "gpu", code).bucket is not None, code
    xids = {int(e.code) for e in cat.of_class(FaultClass.GPU) if e.code.isdigit()}
    assert xids == set(range(1, 173))


def test_buckets_of_well_known_xids_are_nvidias() -> None:
    cat = load_catalog()
    expected = {13: XidBucket.RESTART_APP, 31: XidBucket.RESTART_APP, 43: XidBucket.IGNORE,
                48: XidBucket.WORKFLOW_XID_48, 63: XidBucket.IGNORE, 64: XidBucket.RESET_GPU,
                74: XidBucket.WORKFLOW_NVLINK_ERR,
                79: XidBucket.RESTART_BM, 94: XidBucket.RESTART_APP, 95: XidBucket.RESET_GPU,
                151: XidBucket.RESTART_VM, 154: XidBucket.XID_154, 172: XidBucket.UNPUBLISHED}
    assert {code: known_fault(cat, "gpu", code).bucket for code in expected} == expected


def test_every_entry_follows_its_bucket_and_fatal_repairs_outside_gpu() -> None:
    for e in load_catalog().entries.values():
        if e.bucket is not None:
            assert (e.severity, e.action) == (BUCKETS[e.bucket].severity, BUCKETS[e.bucket].action), e
        elif e.severity == Severity.FATAL:
            assert e.action in (CatalogAction.RESET, CatalogAction.REPLACE), e
        else:
            assert e.action == CatalogAction.NONE, e
        assert e.bucket is not None or e.fault_class != FaultClass.GPU, e


def test_application_buckets_never_raise_a_condition_nor_repair() -> None:
    assert {XidBucket.RESTART_APP, XidBucket.IGNORE} <= APPLICATION_BUCKETS
    for bucket in APPLICATION_BUCKETS:
        assert BUCKETS[bucket].severity != Severity.FATAL
        assert BUCKETS[bucket].action == CatalogAction.NONE


def test_unknown_codes_are_reported_and_not_repaired() -> None:
    cat = load_catalog()
    for fc in FaultClass:
        e = cat.entry_or_unknown(fc, 4242)
        assert (e.severity, e.action, e.code) == (Severity.FATAL, CatalogAction.NONE, "4242")


@pytest.mark.parametrize("name, action", [
    ("GPU recovery action: Node Reboot Required", CatalogAction.RESET),
    ("GPU recovery action: GPU Reset Required", CatalogAction.RESET),
    ("GPU recovery action: Drain and Reset", CatalogAction.RESET),
    ("GPU recovery action: None", CatalogAction.NONE),
    ("GPU recovery action: Drain P2P", CatalogAction.NONE),  # quiesce P2P; a later Xid 154 names the action
    ("GPU Recovery Action Changed", CatalogAction.NONE),  # names no action: the companion Xid decides
])
def test_xid_154s_action_is_the_one_its_line_names(name: str, action: CatalogAction) -> None:
    assert load_catalog().action_of("gpu", "154", name) == action


@pytest.mark.parametrize("broken, complaint", [
    ({"classes": {"gpu": [{"code": 1, "name": "x", "bucket": "RESET_GPU", "sevirity": "x"}]}}, "unknown keys"),
    ({"classes": {"nvswitch": [{"code": 1, "name": "x", "severity": "fatal", "action": "off"}]}},
     "per-pool override"),
    ({"unknown": {fc.value: {"action": "off", "severity": "fatal"} for fc in FaultClass}}, "per-pool override"),
    ({"classes": {"nvswitch": [{"code": 1, "name": "x", "severity": "bad", "action": "reset"}]}}, "severity"),
    ({"classes": {"nvswitch": [{"code": 1, "name": "x", "severity": "fatal"}]}}, "missing keys"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "fatal", "action": "reset"}]}}, "missing keys"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "bucket": "REBOOT_PLEASE"}]}}, "bucket"),
    ({"classes": {"gpu": [{"code": 13, "name": "x", "bucket": "RESTART_APP", "severity": "fatal",
                           "action": "reset"}]}}, "bucket RESTART_APP means"),
    ({"classes": {"nvswitch": [{"code": 1, "name": "x", "bucket": "RESET_GPU", "severity": "fatal",
                                "action": "reset"}]}}, "only gpu entries"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "bucket": "RESET_GPU"},
                          {"code": 1, "name": "y", "bucket": "RESET_GPU"}]}}, "duplicate"),
    ({"classes": {"gpus": []}}, "classes"),
    ({"colour": "blue"}, "unknown top-level keys"),
])
def test_the_schema_rejects_mistakes(broken: dict[str, object], complaint: str) -> None:
    with pytest.raises(CatalogError, match=complaint):
        parse_catalog(minimal(**broken))


def test_an_entry_may_repeat_what_its_bucket_says() -> None:
    cat = parse_catalog(minimal(classes={"gpu": [{"code": 46, "name": "x", "bucket": "RESET_GPU",
                                                   "severity": "fatal", "action": "reset"}]}))
    assert cat.lookup("gpu", 46) is not None and cat.lookup("gpu", 46).action == CatalogAction.RESET  # type: ignore[union-attr]


def test_an_operator_catalog_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(minimal()))
    assert load_catalog(str(path)).lookup("gpu", "79") is not None
