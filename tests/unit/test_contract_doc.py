"""docs/contract.md states the names and events that autoclusters/names.py defines: the
tables are checked against the code, so neither can change alone."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from autoclusters import names as n

DOC = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


def _table(marker: str, column: int) -> list[str]:
    """The first `code` of ``column`` in each row of the table after ``<!-- marker``."""
    body = DOC.read_text().split(f"<!-- {marker}", 1)[1].splitlines()[1:]
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), body))[2:]  # after header, separator
    return [re.findall(r"`([^`]+)`", row.split("|")[column])[0] for row in rows]


def test_the_names_table_is_what_names_py_writes() -> None:
    d = n.Names()
    expected = [d.pool_label, d.maintenance_required, d.maintenance_approved, d.taint_key,
                d.auto_replacement_label, d.gpu_condition, d.interconnect_condition, d.detector_health_condition,
                d.api_group]
    assert _table("names-table", 2) == expected


def test_the_events_table_lists_every_event_reason_once() -> None:
    reasons = {value for key, value in vars(n).items() if key.startswith("EVENT_")}
    listed = _table("events-table", 1)
    assert len(listed) == len(set(listed))
    assert set(listed) == reasons


def test_the_condition_reasons_are_named() -> None:
    text = DOC.read_text()
    for key, value in vars(n).items():
        if key.startswith("REASON_"):
            assert f"`{value}`" in text, key


def test_every_provider_type_is_named() -> None:
    from autoclusters.deploy.providers import ProviderType

    section = DOC.read_text().split("## Providers", 1)[1].split("\n## ", 1)[0]
    assert {t.value for t in ProviderType} <= set(re.findall(r"`([A-Za-z][A-Za-z0-9]*)`", section))
