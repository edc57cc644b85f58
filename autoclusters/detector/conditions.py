"""What the node's fault conditions should say, derived from the tracker's state.

Reasons and messages come from the fault contract (``faults/contract.py``), the table from
which ``Catalog.fault_from_condition`` also reads a fault's class and code back, because that
is how the controller learns which fault to repair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from autoclusters import names as n
from autoclusters.api import CatalogAction
from autoclusters.detector.source_records import Record, SourceState, SourceStatus
from autoclusters.detector.window import Active, FaultTracker
from autoclusters.faults import contract as fc
from autoclusters.faults.catalog import Catalog

GPU_CLASSES = fc.CLASSES[fc.Condition.GPU]
# The health condition's message ends with every source's state (docs/contract.md):
# " Sources: dcgm off (no DCGM hostengine configured); kmsg on; nvml unavailable and expected (...)."
SOURCES_PREFIX = " Sources: "
_REASON_LEN = 120
_MESSAGE_LEN = 1000
_SOURCE_ITEM = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+) (?P<status>on|off|unavailable)(?P<expected> and expected)?"
                          r"(?: \((?P<reason>.*)\))?$")

_ACTION_RANK = {CatalogAction.REPLACE: 0, CatalogAction.RESET: 1, CatalogAction.NONE: 2}


@dataclass(frozen=True)
class ConditionState:
    type: str
    status: str
    reason: str
    message: str


def reason_for(record: Record) -> str:
    return fc.fault_row(record.fault_class, record.code).reason


def message_for(record: Record) -> str:
    """``GPU 3 reported Xid 79 (GPU has fallen off the bus).`` and its siblings."""
    return fc.fault_message(record.fault_class, record.subject, record.code, record.name, record.known)


def _primary(faults: list[Active], catalog: Catalog) -> Active:
    """The fault the condition names: the heaviest repair first, then the oldest."""
    def rank(a: Active) -> tuple[int, float]:
        action = catalog.action_of(a.record.fault_class, a.record.code, a.record.name)
        return (_ACTION_RANK[action], a.first_seen)
    return min(faults, key=rank)


def _fault_condition(cond: fc.Condition, tracker: FaultTracker, now: float, catalog: Catalog,
                     names: n.Names) -> ConditionState | None:
    ctype, classes = cond.type_in(names), fc.CLASSES[cond]
    confirmed = [a for a in tracker.confirmed(now) if a.record.fault_class in classes]
    if confirmed:
        rec = _primary(confirmed, catalog).record
        return ConditionState(ctype, "True", reason_for(rec), message_for(rec))
    if any(a.record.fault_class in classes for a in tracker.pending(now)):
        return None  # inside the window: neither raise nor clear yet
    clear = fc.clear_row(cond)
    return ConditionState(ctype, "False", clear.reason, clear.render())


def desired_conditions(tracker: FaultTracker, now: float, catalog: Catalog, names: n.Names,
                       poll_error: str = "", states: Mapping[str, SourceState] | None = None,
                       ) -> list[tuple[str, ConditionState | None]]:
    """Per condition type the state to write, or None for "keep what is there"."""
    return [(cond.type_in(names), _fault_condition(cond, tracker, now, catalog, names)) for cond in fc.CLASSES] + [
        (names.detector_health_condition, health_condition(tracker.source_errors, names, poll_error, states))]


def _one_line(text: str, limit: int) -> str:
    """``text`` as one item of the sources list: no separators of the list, at most ``limit`` characters."""
    flat = " ".join(text.replace(";", ",").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def sources_text(states: Mapping[str, SourceState]) -> str:
    """`` Sources: dcgm off (no DCGM hostengine configured); kmsg on.`` ("" without sources)."""
    items = []
    for name, st in sorted(states.items()):
        expected = " and expected" if st.status == SourceStatus.UNAVAILABLE and st.expected else ""
        why = f" ({_one_line(st.reason, _REASON_LEN)})" if st.reason and st.status != SourceStatus.ON else ""
        items.append(f"{name} {st.status}{expected}{why}")
    return f"{SOURCES_PREFIX}{'; '.join(items)}." if items else ""


def parse_sources(message: str) -> dict[str, SourceState]:
    """The sources a health condition's message lists (``sources_text`` read back); {} when it lists none."""
    _, sep, tail = message.rpartition(SOURCES_PREFIX)
    if not sep or not tail.endswith("."):
        return {}
    out: dict[str, SourceState] = {}
    for item in tail[:-1].split("; "):
        m = _SOURCE_ITEM.match(item)
        if m:
            out[m["name"]] = SourceState(SourceStatus(m["status"]), m["reason"] or "", bool(m["expected"]))
    return out


def blind_spots(states: Mapping[str, SourceState]) -> dict[str, str]:
    """The sources the node's hardware implies that are unavailable, with why."""
    return {name: st.reason for name, st in sorted(states.items())
            if st.status == SourceStatus.UNAVAILABLE and st.expected}


def health_condition(source_errors: dict[str, str], names: n.Names, poll_error: str = "",
                     states: Mapping[str, SourceState] | None = None) -> ConditionState:
    """The agent's own health: True names every source it cannot read, and the error its last
    poll raised (``poll_error``: a bug of the agent's own, which leaves it blind), or else every
    source the node's hardware implies that is unavailable (``states``; a blind spot, not an
    absence). The message ends with every source's state. Never a GPU fault."""
    tail = sources_text(states or {})

    def state(status: str, reason: str, **fields: str) -> ConditionState:
        head = fc.row(fc.Condition.HEALTH, status, reason).render(**fields)
        return ConditionState(names.detector_health_condition, status, reason,
                              head[: _MESSAGE_LEN - len(tail)] + tail)

    parts = "; ".join(f"{src}: {err}" for src, err in sorted(source_errors.items()))
    if poll_error:
        unreadable = f"; cannot read {parts}" if parts else ""
        return state("True", n.REASON_POLL_FAILED, error=f"{poll_error}{unreadable}")
    if source_errors:
        return state("True", n.REASON_SOURCE_UNREADABLE, sources=parts)
    blind = blind_spots(states or {})
    if blind:
        said = "; ".join(f"{src}: {why}" for src, why in blind.items())
        return state("True", n.REASON_EXPECTED_SOURCE_UNAVAILABLE, sources=said)
    return state("False", n.REASON_SOURCES_READABLE)
