"""The fault contract: what each node condition the detector writes says, written once.

One ``Row`` per thing a condition can say: its condition type (a name of ``names.Names``,
so it follows the brand prefix), status, reason (``names.py``) and message template. The
detector renders a fault's message from its row (``render``); the controller reads the fault
class and code back out of a True fault condition (``parse``) with a pattern derived from the
same template, so the two directions cannot drift. docs/detector.md's "Conditions" table is
rendered from the rows (``faults/table.py``, ``conditions_table``), and the messages are those
of docs/contract.md word for word.

The detector's health condition has rows here too (its message heads), though it never names
a fault: the controller reads only the fault conditions.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from enum import StrEnum

from autoclusters import names as n
from autoclusters.api import FaultClass


class Condition(StrEnum):
    """A condition type the detector writes; the value is its property of ``names.Names``."""

    GPU = "gpu_condition"
    INTERCONNECT = "interconnect_condition"
    HEALTH = "detector_health_condition"

    def type_in(self, names: n.Names) -> str:
        return str(getattr(names, self.value))


class Codes(StrEnum):
    """Which codes of its class a fault row carries (a GPU Xid is a number, an NVML finding a name)."""

    ANY = "any"
    NUMBER = "number"
    NAME = "name"  # anything but a number

    def holds(self, code: str) -> bool:
        return self == Codes.ANY or (self == Codes.NUMBER) == code.isdigit()


# What each field of a template may hold when a message is read back. A subject is the
# shortest text before the template's next literal ("GPU 3", "HCA mlx5_0 port 1"), a code
# has no space, the rest is free text.
_FIELD = {"subject": ".+?", "name": ".*", "sources": ".*", "error": ".*"}
_CODE = {Codes.ANY: "[^ ]+", Codes.NAME: "[^ ]+", Codes.NUMBER: "[0-9]+"}
# An Xid code the catalog does not list: what its message says in place of the name.
UNKNOWN_NAME = "not in the fault catalog"


@dataclass(frozen=True)
class Row:
    condition: Condition
    status: str  # "True" or "False"
    reason: str
    template: str  # str.format fields: subject, code, name (fault rows); sources, error (health)
    example: dict[str, str] = field(default_factory=dict)  # the docs' example message
    note: str = ""  # after the docs' example
    fault_class: FaultClass | None = None  # a True fault row: the class it reports
    codes: Codes = Codes.ANY
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = []
        for literal, name, spec, conv in string.Formatter().parse(self.template):
            parts.append(re.escape(literal))
            if name is not None:
                if spec or conv or not name:
                    raise ValueError(f"{self.reason}: template fields are plain names: {self.template!r}")
                parts.append(f"(?P<{name}>{_CODE[self.codes] if name == 'code' else _FIELD[name]})")
        object.__setattr__(self, "_pattern", re.compile("".join(parts)))

    def render(self, **fields: str) -> str:
        return self.template.format(**fields)

    def parse(self, message: str) -> dict[str, str] | None:
        """The fields of ``message`` if this row's template renders it, else None."""
        m = self._pattern.fullmatch(message)
        return m.groupdict() if m else None


ROWS = (
    Row(Condition.GPU, "True", n.REASON_XID, "{subject} reported Xid {code} ({name}).",
        {"subject": "GPU 3", "code": "79", "name": "GPU has fallen off the bus"},
        fault_class=FaultClass.GPU, codes=Codes.NUMBER),
    Row(Condition.GPU, "True", n.REASON_SXID, "{subject} reported SXID {code}.",
        {"subject": "NVSwitch", "code": "24007"}, fault_class=FaultClass.NVSWITCH),
    Row(Condition.GPU, "True", n.REASON_DCGM, "{subject} reported {code}.",
        {"subject": "GPU 5", "code": "DCGM_FR_NVLINK_DOWN"}, fault_class=FaultClass.DCGM),
    Row(Condition.GPU, "True", n.REASON_GPU_OTHER, "{subject} reported {code}.",
        {"subject": "GPU 2", "code": "ROW_REMAP_FAILURE"}, "(NVML findings)",
        fault_class=FaultClass.GPU, codes=Codes.NAME),
    Row(Condition.GPU, "False", n.REASON_NO_GPU_FAULT, "No GPU fault."),
    Row(Condition.INTERCONNECT, "True", n.REASON_INTERCONNECT, "{subject} reported {code}.",
        {"subject": "HCA mlx5_0 port 1", "code": "port_down"}, fault_class=FaultClass.INTERCONNECT),
    Row(Condition.INTERCONNECT, "False", n.REASON_NO_INTERCONNECT_FAULT, "No interconnect fault."),
    Row(Condition.HEALTH, "True", n.REASON_SOURCE_UNREADABLE, "Cannot read {sources}",
        {"sources": "dcgm: ...; nvml: ..."}),
    Row(Condition.HEALTH, "True", n.REASON_POLL_FAILED, "The detector's poll failed: {error}",
        {"error": "KeyError: ...; cannot read nvml: ..."}, "(a bug of the agent's own, below)"),
    Row(Condition.HEALTH, "True", n.REASON_EXPECTED_SOURCE_UNAVAILABLE,
        "Unavailable although this node's hardware implies it: {sources}",
        {"sources": "nvml: NVML cannot start: ..."}),
    Row(Condition.HEALTH, "False", n.REASON_SOURCES_READABLE, "Every fault source on this node is readable."),
)
FAULT_ROWS = tuple(r for r in ROWS if r.fault_class is not None)
# The classes each fault condition reports (the GPU condition: GPU, NVSwitch and DCGM faults).
CLASSES = {c: tuple(dict.fromkeys(r.fault_class for r in FAULT_ROWS if r.condition == c and r.fault_class))
           for c in (Condition.GPU, Condition.INTERCONNECT)}
_BY_REASON = {(r.condition, r.status, r.reason): r for r in ROWS}


def row(condition: Condition, status: str, reason: str) -> Row:
    return _BY_REASON[(condition, status, reason)]


def clear_row(condition: Condition) -> Row:
    """The False row of a fault condition (no fault)."""
    return next(r for r in ROWS if r.condition == condition and r.status == "False")


def fault_row(fault_class: FaultClass, code: str) -> Row:
    """The row a fault of this class and code is written with."""
    found = next((r for r in FAULT_ROWS if r.fault_class == fault_class and r.codes.holds(code)), None)
    if found is None:
        raise ValueError(f"the fault contract has no row for {fault_class} code {code!r}")
    return found


def fault_message(fault_class: FaultClass, subject: str, code: str, name: str, known: bool = True) -> str:
    """``GPU 3 reported Xid 79 (GPU has fallen off the bus).`` and its siblings."""
    return fault_row(fault_class, code).render(subject=subject, code=code, name=name if known else UNKNOWN_NAME)


def read_fault(ctype: str, reason: str, message: str, names: n.Names) -> tuple[FaultClass, str] | None:
    """The class and code a True condition of type ``ctype`` reports; None for a condition that
    reports no fault. A reason this table does not know reads as its condition's first row; a
    message its row's template does not render has the code ``unknown``."""
    cond = next((c for c in CLASSES if c.type_in(names) == ctype), None)
    if cond is None:
        return None
    found = _BY_REASON.get((cond, "True", reason))
    r = found if found is not None and found.fault_class else next(r for r in FAULT_ROWS if r.condition == cond)
    assert r.fault_class is not None
    fields = r.parse(message)
    return r.fault_class, fields["code"] if fields else "unknown"
