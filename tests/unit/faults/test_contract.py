"""The fault contract (``faults/contract.py``): every message the detector renders from it is
read back, through the same table, to the fault it names, and the docs show the table."""

from __future__ import annotations

import ast
import string
from pathlib import Path

import pytest

from autoclusters.api import FaultClass
from autoclusters.faults import contract as fc
from autoclusters.faults import table as docs
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names

ROOT = Path(__file__).resolve().parents[3]
BRANDS = (Names(), Names(domain="crusoe.ai", prefix="Crusoe"))
SUBJECTS = {FaultClass.GPU: ("GPU 3", "GPU PCI:0000:3b:00"), FaultClass.NVSWITCH: ("NVSwitch",),
            FaultClass.DCGM: ("GPU 5",), FaultClass.INTERCONNECT: ("HCA mlx5_0 port 1",)}


def _written(fault_class: FaultClass, subject: str, code: str, name: str, known: bool, names: Names) -> dict[str, str]:
    """The condition the detector writes for this fault, every part from the table."""
    row = fc.fault_row(fault_class, code)
    return {"type": row.condition.type_in(names), "status": "True", "reason": row.reason,
            "message": fc.fault_message(fault_class, subject, code, name, known)}


@pytest.mark.parametrize("names", BRANDS, ids=lambda n: n.prefix)
def test_every_catalogued_code_of_every_class_renders_and_parses_back(names: Names) -> None:
    catalog = load_catalog()
    assert {e.fault_class for e in catalog.entries.values()} == set(FaultClass)
    for entry in catalog.entries.values():
        for subject in SUBJECTS[entry.fault_class]:
            cond = _written(entry.fault_class, subject, entry.code, entry.name, True, names)
            assert fc.read_fault(cond["type"], cond["reason"], cond["message"], names) == (entry.fault_class,
                                                                                          entry.code), cond
            fields = fc.fault_row(entry.fault_class, entry.code).parse(cond["message"])
            assert fields is not None and fields["subject"] == subject, cond
            assert fields.get("name", entry.name) == entry.name, cond
            ref = catalog.fault_from_condition(cond, names)
            assert ref is not None and (ref.fault_class, ref.code, ref.known) == (entry.fault_class, entry.code, True)


def test_unknown_codes_render_as_unknown_and_parse_back_with_their_code() -> None:
    names = Names()
    for fault_class, code in ((FaultClass.GPU, "999"), (FaultClass.GPU, "SOMETHING_NEW"),
                              (FaultClass.NVSWITCH, "31337"), (FaultClass.DCGM, "DCGM_FR_NEW"),
                              (FaultClass.INTERCONNECT, "link_flap_new")):
        cond = _written(fault_class, SUBJECTS[fault_class][0], code, "whatever the source said", False, names)
        assert fc.read_fault(cond["type"], cond["reason"], cond["message"], names) == (fault_class, code)
    assert fc.fault_message(FaultClass.GPU, "GPU 3", "999", "x", known=False) == \
        f"GPU 3 reported Xid 999 ({fc.UNKNOWN_NAME})."


def test_a_message_no_template_renders_keeps_its_class_and_reads_as_code_unknown() -> None:
    names = Names()
    gpu, ic = names.gpu_condition, names.interconnect_condition
    assert fc.read_fault(gpu, "NvidiaXIDError", "Xid 79 on GPU 3", names) == (FaultClass.GPU, "unknown")
    assert fc.read_fault(gpu, "NvidiaXIDError", "GPU 3 reported Xid 79x (y).", names) == (FaultClass.GPU, "unknown")
    assert fc.read_fault(gpu, "NvidiaDCGMError", "DCGM_FR_NVLINK_DOWN on GPU 1", names) == (FaultClass.DCGM, "unknown")
    # a reason the table does not know reads as the condition's first row
    assert fc.read_fault(gpu, "SomeOtherReason", "GPU 1 reported Xid 48 (x).", names) == (FaultClass.GPU, "48")
    assert fc.read_fault(ic, "SomeOtherReason", "HCA mlx5_1 port 2 reported port_down.", names) == \
        (FaultClass.INTERCONNECT, "port_down")
    assert fc.read_fault(names.detector_health_condition, "FaultSourceUnreadable", "Cannot read nvml: x", names) is None
    assert fc.read_fault("CrusoeGPUFault", "NvidiaXIDError", "GPU 3 reported Xid 79 (x).", names) is None


def test_the_docs_conditions_table_is_the_table() -> None:
    text = (ROOT / "docs" / "detector.md").read_text()
    section = text.split("\n## Conditions", 1)[1].split("\n## ", 1)[0]
    shown = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert shown == docs.conditions_table()
    assert docs.with_conditions_table(text) == text, "docs/detector.md's conditions table is stale: make manifests"


def test_the_examples_are_true_and_use_every_field_of_their_template() -> None:
    catalog = load_catalog()
    for row in fc.ROWS:
        fields = {name for _, name, _, _ in string.Formatter().parse(row.template) if name}
        assert set(row.example) == fields, row.reason
        assert row.parse(row.render(**row.example)) == row.example, row.reason
        if row.fault_class is not None:
            entry = catalog.lookup(row.fault_class, row.example["code"])
            assert entry is not None, row.reason
            assert row.example.get("name", entry.name) == entry.name, row.reason


def test_every_class_has_a_row_for_every_code_and_rows_are_distinct() -> None:
    for fault_class in FaultClass:
        for code in ("1", "A_NAME"):
            assert fc.fault_row(fault_class, code).fault_class == fault_class
    keys = [(r.condition, r.status, r.reason) for r in fc.ROWS]
    assert len(keys) == len(set(keys))
    for cond in fc.Condition:
        assert isinstance(getattr(Names, cond.value), property), cond
        assert [r.status for r in fc.ROWS if r.condition == cond].count("False") == 1, cond


def test_no_reader_of_conditions_spells_a_template_in_a_regular_expression() -> None:
    """The controller's side reads through the table; a hand-written regex that names a
    template's words (``Xid``, ``SXID``, ``reported``) would be the second copy."""
    words = {w for r in fc.FAULT_ROWS for lit, *_ in string.Formatter().parse(r.template)
             for w in lit.split() if w.isalpha()}
    assert {"reported", "Xid", "SXID"} <= words
    found = []
    for top in ("faults", "controller", "ops", "cli", "webhook", "policy"):
        for path in sorted((ROOT / "autoclusters" / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
                    for arg in node.args[:1]:
                        for const in ast.walk(arg):
                            if isinstance(const, ast.Constant) and isinstance(const.value, str):
                                found += [(path.name, w) for w in words if w in const.value]
    assert found == []


def test_every_message_the_docs_quote_is_one_the_detector_writes() -> None:
    """docs/contract.md and docs/detector.md quote fault messages in their prose; each is a
    message of a row, naming a catalogued code by its catalog name (or the unknown words, or
    the recovery action Xid 154 carries)."""
    from autoclusters.api import DriverRecoveryAction
    from autoclusters.faults.recovery import recovery_name

    catalog = load_catalog()
    quoted = []
    for page in ("contract.md", "detector.md"):
        spans = (ROOT / "docs" / page).read_text().split("`")[1::2]
        quoted += [m for m in (" ".join(s.split()) for s in spans) if " reported " in m and m.endswith(".")]
    assert len(quoted) >= 8
    for message in quoted:
        rows = [(r, f) for r in fc.FAULT_ROWS if (f := r.parse(message)) is not None]
        assert rows, message
        row, fields = rows[0]
        assert row.fault_class is not None
        entry = catalog.lookup(row.fault_class, fields["code"])
        names = {fc.UNKNOWN_NAME} if entry is None else {entry.name} | {
            recovery_name(a) for a in DriverRecoveryAction if fields["code"] == "154"}
        assert fields.get("name", next(iter(names))) in names, message
