"""Small builders of node, pool and Remediation dicts for the operator-tool unit tests."""

from __future__ import annotations

from typing import Any

from autoclusters.names import Names

NAMES = Names()


def node(name: str, pool: str = "a", *, fault: tuple[str, str, str] | None = None, required: bool = False,
         approved: bool = False, ready: bool = True, since: str = "2026-01-01T00:00:00Z",
         cordoned: bool = False, degraded: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
    lab = {NAMES.pool_label: pool} if pool else {}
    lab.update(labels or {})
    if required:
        lab[NAMES.maintenance_required] = "true"
    if approved:
        lab[NAMES.maintenance_approved] = "true"
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if fault:
        ctype, reason, message = fault
        conds.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                      "lastTransitionTime": since})
    else:
        conds.append({"type": NAMES.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
                      "lastTransitionTime": since})
    if degraded:
        conds.append({"type": NAMES.detector_health_condition, "status": "True", "reason": "DcgmUnavailable"})
    spec: dict[str, Any] = {}
    if required:
        spec["taints"] = [{"key": NAMES.taint_key, "value": "true", "effect": "PreferNoSchedule"}]
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": lab, "resourceVersion": "7"}, "spec": spec,
            "status": {"conditions": conds}}


def xid79(gpu: int = 3) -> tuple[str, str, str]:
    return (NAMES.gpu_condition, "NvidiaXIDError", f"GPU {gpu} reported Xid 79 (GPU has fallen off the bus).")


def pool(name: str, mode: str = "auto", *, status: dict[str, Any] | None = None,
         selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"consentMode": mode}
    if selector is not None:
        spec["nodeSelector"] = selector
    obj: dict[str, Any] = {"metadata": {"name": name}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def record(name: str, node_name: str, pool_name: str = "a", *, phase: str = "AwaitingApproval",
           created: str = "2026-01-01T00:00:00Z", completed: str | None = None, outcome: str = "",
           action: str = "reset", mode: str = "propose", replacement: str = "",
           steps: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "created": created, "outcome": outcome,
                              "steps": [{"phase": p, "time": t, "message": m} for p, t, m in steps or []]}
    if completed:
        status["completed"] = completed
    if replacement:
        status["replacementNode"] = replacement
    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"node": node_name, "pool": pool_name, "consentMode": mode, "action": action,
                     "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                               "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)."}},
            "status": status}
