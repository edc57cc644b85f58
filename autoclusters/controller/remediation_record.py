"""The ``Remediation`` record: the persisted form of a ``RepairState``.

The record's status is the source of truth for a repair in flight; these two functions are
the only place that maps between the dataclass and the object, so what the controller
knows after a restart is exactly what it wrote.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from autoclusters import api
from autoclusters.api import TERMINAL, ConsentMode, FaultClass, Phase, RepairAction
from autoclusters.clock import parse_iso, utc_iso
from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep
from autoclusters.memo import ObjectMemo
from autoclusters.names import Names
from autoclusters.providers.actions import ACTIONS
from autoclusters.providers.types import Operation

JSON = dict[str, Any]


def node_label(names: Names) -> str:
    return f"{names.api_group}/node"


def pool_label(names: Names) -> str:
    return f"{names.api_group}/pool"


def _label_value(value: str) -> str:
    return value if len(value) <= 63 else hashlib.sha256(value.encode()).hexdigest()[:63]


def record_name(node: str, condition_type: str, transition_time: str, seq: int) -> str:
    """Deterministic for one fault episode, so two writers that race create one record."""
    digest = hashlib.sha256(f"{condition_type}|{transition_time}|{seq}".encode()).hexdigest()[:8]
    return f"{node[:200]}-{digest}"


_PHASES = {p.value: p for p in Phase}


def phase_of(obj: JSON) -> Phase | None:
    """The record's phase; None for none or one this controller does not know."""
    value = (obj.get("status") or {}).get("phase")
    return _PHASES.get(value) if isinstance(value, str) else None


def is_active(obj: JSON) -> bool:
    phase = phase_of(obj)
    return phase is None or phase not in TERMINAL


def new_record(state: RepairState, names: Names) -> JSON:
    return {
        "apiVersion": f"{names.api_group}/{api.VERSION}",
        "kind": api.REMEDIATIONS.kind,
        "metadata": {"name": state.name, "labels": {node_label(names): _label_value(state.node),
                                                     pool_label(names): _label_value(state.pool),
                                                     "app.kubernetes.io/part-of": "autoclusters"}},
        "spec": {"node": state.node, "pool": state.pool, "consentMode": state.consent_mode.value,
                 "action": str(state.action),
                 "fault": {"class": state.fault.fault_class, "code": state.fault.code,
                           "reason": state.fault.reason, "message": state.fault.message}},
    }


def _ts(value: Any) -> str | None:
    return utc_iso(value) if value is not None else None


_STEPS: ObjectMemo[JSON] = ObjectMemo(4096)  # a step -> its status form


def _step(st: TimelineStep) -> JSON:
    """A timeline step as the status holds it. A repair's steps are kept from state to state and
    written with every status: each is formatted once (a copy handed out, the kept one unshared)."""
    return dict(_STEPS.get(st, lambda: {"phase": st.phase, "time": utc_iso(st.time), "message": st.message}))


def status_of(s: RepairState) -> JSON:
    status: JSON = {
        "phase": s.phase.value, "action": str(s.action), "approved": s.approved, "escalated": s.escalated,
        "escalatedFrom": s.escalated_from, "optOut": s.opt_out, "attempts": s.attempts,
        "nodeWasCordoned": s.node_was_cordoned, "warningAttempt": s.warning_attempt,
        "hold": s.hold, "outcome": s.outcome, "message": s.message,
        "replacementNode": s.replacement_node,
        "steps": [_step(st) for st in s.steps],
    }
    for key, value in (("drainStarted", s.drain_started), ("preDrainDeadline", s.pre_drain_deadline),
                       ("evictionStarted", s.eviction_started), ("verifyStarted", s.verify_started),
                       ("created", s.created), ("completed", s.completed)):
        if value is not None:
            status[key] = _ts(value)
    if s.operation is not None:
        op = s.operation
        status["operation"] = {"id": op.id, "action": str(op.action), "started": utc_iso(op.started),
                               "bootIdBefore": op.boot_id_before, "newNode": op.new_node}
        if op.provider:  # the spec as the pool wrote it (type and settings), readable in the record
            status["operation"]["provider"] = json.loads(op.provider)
    return status


def status_patch(old: JSON, new: JSON) -> JSON:
    """The JSON merge patch (RFC 7386) that turns the stored status ``old`` into ``new``: what
    changed, and ``null`` for each key ``new`` no longer has, so nothing of an earlier state
    lingers under a merge (an operation bound to another provider type than the one before
    it: its spec's keys differ)."""
    patch: JSON = {k: None for k in old if k not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = status_patch(before, value)
            if inner:
                patch[key] = inner
        elif value != before or key not in old:
            patch[key] = value
    return patch


def _time(value: Any, field: str) -> datetime:
    t = parse_iso(value)
    if t is None:
        raise ValueError(f"status.{field} is empty")
    return t


class UnreadableRecord(ValueError):
    """A record this controller cannot read (hand-edited, damaged, or written by a newer
    version): the message names the record and the field. Such a record is reported and left
    as it is; it never stops the garbage collector or another node's reconcile."""


_PARSED: ObjectMemo[RepairState | UnreadableRecord | None] = ObjectMemo(1024)  # a record -> its state


def state_of(obj: JSON) -> RepairState | None:
    """The state a record holds; None for a record created but not yet given a phase. Raises
    ``UnreadableRecord`` for one that cannot be read.

    Records in the controller's store are replaced, never changed in place, and a reconcile
    reads the same ones again and again: the state parsed from a record object is kept (and so
    is the reason it could not be parsed)."""
    got = _PARSED.get(obj, lambda: _parse_or_problem(obj))
    if isinstance(got, UnreadableRecord):
        raise UnreadableRecord(str(got))  # a new exception each time: a kept one would grow its traceback
    return got


def _parse_or_problem(obj: JSON) -> RepairState | UnreadableRecord | None:
    name = ((obj.get("metadata") or {}) if isinstance(obj, dict) else {}).get("name", "?")
    try:
        return _parse(obj)
    except UnreadableRecord as e:
        return UnreadableRecord(f"Remediation {name}: {e}")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return UnreadableRecord(f"Remediation {name}: {type(e).__name__}: {e}")


def _operation(op: Any) -> Operation | None:
    if not op:
        return None
    if not isinstance(op, dict):
        raise UnreadableRecord("status.operation is not an object")
    if not isinstance(op.get("id"), str) or not op["id"]:
        raise UnreadableRecord("status.operation has no id")
    if op.get("action") not in ACTIONS:
        raise UnreadableRecord(f"status.operation.action {op.get('action')!r} is not one of "
                               f"{', '.join(ACTIONS.names())}")
    provider = op.get("provider")
    if provider is not None and not isinstance(provider, dict):
        raise UnreadableRecord("status.operation.provider is not an object")
    return Operation(id=op["id"], action=ACTIONS[op["action"]].name,
                     started=_time(op.get("started"), "operation.started"),
                     boot_id_before=op.get("bootIdBefore", ""), new_node=op.get("newNode", ""),
                     # the same string as ProviderSpec.key(): canonical JSON of the same object
                     provider=json.dumps(provider, sort_keys=True) if provider else "")



def _parse(obj: JSON) -> RepairState | None:
    status = obj.get("status") or {}
    phase = phase_of(obj)
    if phase is None:
        value = status.get("phase")
        if value:  # a phase this controller does not know: a newer version's record, or a damaged one
            raise UnreadableRecord(f"status.phase {value!r} is not a phase this controller knows "
                                   f"({', '.join(_PHASES)})")
        return None
    spec = obj.get("spec") or {}
    f = spec.get("fault") or {}
    operation = _operation(status.get("operation"))
    return RepairState(
        name=obj["metadata"]["name"], node=spec.get("node", ""), pool=spec.get("pool", ""),
        consent_mode=ConsentMode(spec.get("consentMode", api.DEFAULT_CONSENT_MODE)),
        fault=Fault(f.get("class", FaultClass.GPU), str(f.get("code", "")), f.get("reason", ""), f.get("message", "")),
        phase=phase, action=ACTIONS[status.get("action") or spec.get("action") or RepairAction.RESET].name,
        approved=bool(status.get("approved")), escalated=bool(status.get("escalated")),
        escalated_from=status.get("escalatedFrom", ""), opt_out=bool(status.get("optOut")),
        attempts=int(status.get("attempts", 0)), node_was_cordoned=bool(status.get("nodeWasCordoned")),
        drain_started=parse_iso(status.get("drainStarted")),
        pre_drain_deadline=parse_iso(status.get("preDrainDeadline")),
        warning_attempt=int(status.get("warningAttempt", 1)),
        eviction_started=parse_iso(status.get("evictionStarted")), operation=operation,
        verify_started=parse_iso(status.get("verifyStarted")), hold=status.get("hold", ""),
        outcome=status.get("outcome", ""), message=status.get("message", ""),
        replacement_node=status.get("replacementNode", ""), created=parse_iso(status.get("created")),
        completed=parse_iso(status.get("completed")),
        steps=tuple(TimelineStep(st.get("phase", ""), parse_iso(st.get("time")), st.get("message", ""))  # type: ignore[arg-type]
                    for st in status.get("steps") or []),
    )
