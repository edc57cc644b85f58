"""A ``Remediation`` record read into a small, typed view for the operator tools.

The controller writes one record per repair (``spec``: what and why; ``status``: the
phase, a timeline of steps, the outcome). Events expire after an hour; these records
are what ``history`` and ``status`` read, so this reader is lenient about fields it does
not need and never fails on a record written by an older or newer controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoclusters.clock import parse_iso, utc_iso

# Phases of the controller's state machine (autoclusters.controller.statemachine.Phase), by role.
TERMINAL_PHASES = frozenset({"Succeeded", "NotNeeded", "Closed"})
AWAITING_PHASES = frozenset({"AwaitingApproval"})
REPAIRING_PHASES = frozenset({"Draining", "Acting", "Verifying"})
HOLDING_PHASES = frozenset({"Failed", "HumanNeeded"})


@dataclass(frozen=True)
class Step:
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
    steps: tuple[Step, ...]
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
            "completed": utc_iso(self.ended()) if self.ended() else None,
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


def _first(*values: Any) -> Any:
    for v in values:
        if v not in (None, ""):
            return v
    return None


def _text(*values: Any) -> str:
    found = _first(*values)
    return "" if found is None else str(found)


def repair_from_object(obj: dict[str, Any]) -> Repair:
    """Reads a ``Remediation`` object; missing fields become empty strings, never errors."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    fault = spec.get("fault") or {}
    steps = tuple(
        Step(str(s.get("phase", "")), _time(s.get("time")), str(s.get("message", "")))
        for s in status.get("steps") or [] if isinstance(s, dict)
    )
    started = _time(_first(status.get("created"), status.get("startTime"), status.get("started"),
                           meta.get("creationTimestamp")))
    completed = _time(_first(status.get("completed"), status.get("completionTime"), status.get("completedAt")))
    phase = _text(status.get("phase"), steps[-1].phase if steps else None, "Pending")
    return Repair(
        name=str(meta.get("name", "")),
        node=str(spec.get("node", "")),
        pool=str(spec.get("pool", "")),
        consent_mode=_text(spec.get("consentMode")),
        action=_text(status.get("action"), spec.get("action")),
        fault_class=_text(fault.get("class")),
        fault_code=_text(fault.get("code")),
        fault_reason=_text(fault.get("reason")),
        fault_message=_text(fault.get("message")),
        phase=phase,
        outcome=_text(status.get("outcome")),
        message=_text(status.get("message"), steps[-1].message if steps else None),
        replacement_node=_text(status.get("replacementNode")),
        started=started,
        completed=completed,
        steps=steps,
        escalated=bool(status.get("escalated", False)),
        hold=_text(status.get("hold")),
    )
