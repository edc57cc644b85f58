"""The shipped fault catalog loads, follows its schema, and the schema is strict."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoclusters.api import CatalogAction
from autoclusters.faults.catalog import CatalogError, FaultClass, Severity, load_catalog, parse_catalog
from tests.conftest import known_fault


def minimal(**extra: object) -> dict[str, object]:
    return {"version": 1, "unknown": {fc.value: {"action": "reset", "severity": "fatal"} for fc in FaultClass},
            "classes": {"gpu": [{"code": 79, "name": "off the bus", "severity": "fatal", "action": "reset"}]},
            **extra}


def test_the_shipped_catalog_loads_and_covers_every_class() -> None:
    cat = load_catalog()
    for fc in FaultClass:
        assert cat.of_class(fc), f"no {fc} entries"
        assert cat.unknown_action[fc] in (CatalogAction.RESET, CatalogAction.REPLACE)
    assert cat.sources and any("Xid" in s for s in cat.sources)
    assert known_fault(cat, "gpu", 79).name == "GPU has fallen off the bus"
    assert known_fault(cat, "gpu", 79).severity == Severity.FATAL


def test_fatal_entries_name_a_repair_and_warnings_do_not() -> None:
    for e in load_catalog().entries.values():
        if e.severity == Severity.FATAL:
            assert e.action in (CatalogAction.RESET, CatalogAction.REPLACE), e
        else:
            assert e.action == CatalogAction.NONE, e


def test_unknown_codes_get_the_documented_default() -> None:
    e = load_catalog().entry_or_unknown("gpu", 4242)
    assert (e.severity, e.action, e.code) == (Severity.FATAL, CatalogAction.RESET, "4242")


@pytest.mark.parametrize("broken, complaint", [
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "fatal", "action": "reset", "sevirity": "x"}]}},
     "unknown keys"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "fatal", "action": "off"}]}}, "per-pool override"),
    ({"unknown": {fc.value: {"action": "off", "severity": "fatal"} for fc in FaultClass}}, "per-pool override"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "bad", "action": "reset"}]}}, "severity"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "fatal"}]}}, "missing keys"),
    ({"classes": {"gpu": [{"code": 1, "name": "x", "severity": "fatal", "action": "reset"},
                          {"code": 1, "name": "y", "severity": "fatal", "action": "reset"}]}}, "duplicate"),
    ({"classes": {"gpus": []}}, "classes"),
    ({"colour": "blue"}, "unknown top-level keys"),
])
def test_the_schema_rejects_mistakes(broken: dict[str, object], complaint: str) -> None:
    with pytest.raises(CatalogError, match=complaint):
        parse_catalog(minimal(**broken))


def test_an_operator_catalog_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(minimal()))
    assert load_catalog(str(path)).lookup("gpu", "79") is not None
