"""A ``Remediation`` record read into a small, typed view for the operator tools.

The controller writes one record per repair (``spec``: what and why; ``status``: the
phase, a timeline of steps, the outcome). Events expire after an hour; these records
are what ``history`` and ``status`` read. They are read with the controller's own reader
(``controller.remediation_record.state_of``), so the tools see exactly what the controller knows; a
record without a phase yet shows as ``Pending``, and one the reader refuses (written by
another version) shows its spec with the reason in ``message`` instead of failing the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoclusters.api import HOLDING, IN_PROGRESS, TERMINAL, Phase
from autoclusters.clock import parse_iso, utc_iso
from autoclusters.controller.remediation_record import state_of
from autoclusters.controller.statemachine import RepairState

# The controller's phase roles, as the strings the views compare.
TERMINAL_PHASES = frozenset(p.value for p in TERMINAL)
AWAITING_PHASES = frozenset({Phase.AWAITING_APPROVAL.value})
REPAIRING_PHASES = frozenset(p.value for p in IN_PROGRESS)
HOLDING_PHASES = frozenset(p.value for p in HOLDING)
PENDING = "Pending"  # created, not yet given a phase


@dataclass(frozen=True)
class HistoryStep:
    phase: str
    time: datetime | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "time": utc_iso(self.time) if self.time else None, "message": self.message}


@dataclass(frozen=True)
class Repair:
    """One repair as the history shows it."""

    name: str
    node: str
    pool: str
    consent_mode: str
    action: str
    fault_class: str
    fault_code: str
    fault_reason: str
    fault_message: str
    phase: str
    outcome: str
    message: str
    replacement_node: str
    started: datetime | None
    completed: datetime | None
    steps: tuple[HistoryStep, ...]
    escalated: bool = False
    hold: str = ""  # why a Scheduled repair waits (MaxConcurrentRepairs, CircuitBreakerOpen, OptOutPod)

    @property
    def open(self) -> bool:
        """Not finished: awaiting approval, scheduled, in progress, or holding for a human."""
        return self.phase not in TERMINAL_PHASES

    @property
    def fault(self) -> str:
        """``class:code``, the catalog key, e.g. ``gpu:79``."""
        if not self.fault_class:
            return self.fault_reason
        return f"{self.fault_class}:{self.fault_code}" if self.fault_code else self.fault_class

    def ended(self) -> datetime | None:
        """When the repair finished: its completion time, else the last step of a finished record."""
        if self.completed:
            return self.completed
        if not self.open and self.steps and self.steps[-1].time:
            return self.steps[-1].time
        return None

    def duration(self, now: datetime) -> float | None:
        """Seconds from start to end (or to ``now`` while the record is open)."""
        if not self.started:
            return None
        end = self.ended() or (now if self.open else None)
        return max(0.0, (end - self.started).total_seconds()) if end else None

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.name, "node": self.node, "pool": self.pool, "consentMode": self.consent_mode,
            "action": self.action, "escalated": self.escalated,
            "fault": {"class": self.fault_class, "code": self.fault_code, "reason": self.fault_reason,
                      "message": self.fault_message},
            "phase": self.phase, "hold": self.hold or None, "outcome": self.outcome, "message": self.message,
            "replacementNode": self.replacement_node or None,
            "started": utc_iso(self.started) if self.started else None,
            "completed": utc_iso(ended) if (ended := self.ended()) else None,
            "durationSeconds": _round(self.duration(now)),
            "steps": [s.to_dict() for s in self.steps],
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _time(value: Any) -> datetime | None:
    try:
        return parse_iso(value) if isinstance(value, str | datetime) else None
    except ValueError:
        return None


def repair_from_object(obj: dict[str, Any]) -> Repair:
    """Reads a ``Remediation`` object with the controller's reader; never raises."""
    try:
        state, problem = state_of(obj), ""
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        state, problem = None, f"record not readable by this version: {e!r}"
    created = _time((obj.get("metadata") or {}).get("creationTimestamp"))
    if state is not None:
        return _from_state(state, created)
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    fault = spec.get("fault") or {}
    return Repair(
        name=str(meta.get("name", "")), node=str(spec.get("node", "")), pool=str(spec.get("pool", "")),
        consent_mode=str(spec.get("consentMode", "")), action=str(spec.get("action", "")),
        fault_class=str(fault.get("class", "")), fault_code=str(fault.get("code", "")),
        fault_reason=str(fault.get("reason", "")), fault_message=str(fault.get("message", "")),
        phase=str((obj.get("status") or {}).get("phase") or PENDING), outcome="", message=problem,
        replacement_node="", started=created, completed=None, steps=())


def _from_state(s: RepairState, created: datetime | None) -> Repair:
    steps = tuple(HistoryStep(st.phase, st.time, st.message) for st in s.steps)
    return Repair(
        name=s.name, node=s.node, pool=s.pool, consent_mode=s.consent_mode.value, action=str(s.action),
        fault_class=s.fault.fault_class, fault_code=s.fault.code, fault_reason=s.fault.reason,
        fault_message=s.fault.message, phase=s.phase.value, outcome=s.outcome,
        message=s.message or (steps[-1].message if steps else ""), replacement_node=s.replacement_node,
        started=s.created or created, completed=s.completed, steps=steps, escalated=s.escalated, hold=s.hold)
