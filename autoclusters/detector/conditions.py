"""What the node's fault conditions should say, derived from the tracker's state.

Reasons and messages are those of docs/contract.md ("Names") word for word, and every
message is one that ``Catalog.fault_from_condition`` reads back to the same fault class
and code (a unit test checks this for every catalogued code), because that is how the
controller learns which fault to repair.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoclusters import names as n
from autoclusters.api import CatalogAction, FaultClass
from autoclusters.detector.source_records import Record
from autoclusters.detector.window import Active, FaultTracker
from autoclusters.faults.catalog import Catalog

GPU_CLASSES = (FaultClass.GPU, FaultClass.NVSWITCH, FaultClass.DCGM)
NO_GPU_FAULT_MESSAGE = "No GPU fault."
NO_INTERCONNECT_FAULT_MESSAGE = "No interconnect fault."
REASON_SOURCE_UNREADABLE = "FaultSourceUnreadable"
REASON_SOURCES_READABLE = "AllFaultSourcesReadable"
REASON_POLL_FAILED = "DetectorPollFailed"
SOURCES_READABLE_MESSAGE = "Every fault source on this node is readable."

_ACTION_RANK = {CatalogAction.REPLACE: 0, CatalogAction.RESET: 1, CatalogAction.NONE: 2}


@dataclass(frozen=True)
class ConditionState:
    type: str
    status: str
    reason: str
    message: str


def reason_for(record: Record) -> str:
    if record.fault_class == FaultClass.NVSWITCH:
        return n.REASON_SXID
    if record.fault_class == FaultClass.DCGM:
        return n.REASON_DCGM
    if record.fault_class == FaultClass.INTERCONNECT:
        return n.REASON_INTERCONNECT
    return n.REASON_XID if record.code.isdigit() else n.REASON_GPU_OTHER


def message_for(record: Record) -> str:
    """``GPU 3 reported Xid 79 (GPU has fallen off the bus).`` and its siblings."""
    if record.fault_class == FaultClass.GPU:
        if record.code.isdigit():
            name = record.name if record.known else "not in the fault catalog"
            return f"{record.subject} reported Xid {record.code} ({name})."
        return f"{record.subject} reported {record.code}."
    if record.fault_class == FaultClass.NVSWITCH:
        return f"{record.subject} reported SXID {record.code}."
    return f"{record.subject} reported {record.code}."


def _primary(faults: list[Active], catalog: Catalog) -> Active:
    """The fault the condition names: the heaviest repair first, then the oldest."""
    def rank(a: Active) -> tuple[int, float]:
        action = catalog.action_of(a.record.fault_class, a.record.code, a.record.name)
        return (_ACTION_RANK[action], a.first_seen)
    return min(faults, key=rank)


def _fault_condition(ctype: str, classes: tuple[FaultClass, ...], tracker: FaultTracker, now: float,
                     catalog: Catalog, ok_reason: str, ok_message: str) -> ConditionState | None:
    confirmed = [a for a in tracker.confirmed(now) if a.record.fault_class in classes]
    if confirmed:
        rec = _primary(confirmed, catalog).record
        return ConditionState(ctype, "True", reason_for(rec), message_for(rec))
    if any(a.record.fault_class in classes for a in tracker.pending(now)):
        return None  # inside the window: neither raise nor clear yet
    return ConditionState(ctype, "False", ok_reason, ok_message)


def desired_conditions(tracker: FaultTracker, now: float, catalog: Catalog, names: n.Names,
                       poll_error: str = "") -> list[tuple[str, ConditionState | None]]:
    """Per condition type the state to write, or None for "keep what is there"."""
    gpu = _fault_condition(names.gpu_condition, GPU_CLASSES, tracker, now, catalog,
                           n.REASON_NO_GPU_FAULT, NO_GPU_FAULT_MESSAGE)
    ic = _fault_condition(names.interconnect_condition, (FaultClass.INTERCONNECT,), tracker, now, catalog,
                          n.REASON_NO_INTERCONNECT_FAULT, NO_INTERCONNECT_FAULT_MESSAGE)
    return [(names.gpu_condition, gpu), (names.interconnect_condition, ic),
            (names.detector_health_condition, health_condition(tracker.source_errors, names, poll_error))]


def health_condition(source_errors: dict[str, str], names: n.Names, poll_error: str = "") -> ConditionState:
    """The agent's own health: True names every source it cannot read, and the error its last
    poll raised (``poll_error``: a bug of the agent's own, which leaves it blind). Never a GPU fault."""
    parts = "; ".join(f"{src}: {err}" for src, err in sorted(source_errors.items()))
    if poll_error:
        unreadable = f"; cannot read {parts}" if parts else ""
        return ConditionState(names.detector_health_condition, "True", REASON_POLL_FAILED,
                              f"The detector's poll failed: {poll_error}{unreadable}"[:1000])
    if not source_errors:
        return ConditionState(names.detector_health_condition, "False", REASON_SOURCES_READABLE,
                              SOURCES_READABLE_MESSAGE)
    return ConditionState(names.detector_health_condition, "True", REASON_SOURCE_UNREADABLE,
                          f"Cannot read {parts}"[:1000])
