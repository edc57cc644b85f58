"""The unit tests' one set of object builders: nodes, pods, pools, Remediation records and
Karpenter NodeClaims as the API server holds them. A test puts them into the fake API
server (``tests/unit/fakeapi.py``: ``api.put("/api/v1/nodes", node("n1"))``) or hands them
to the code under test; it does not write its own dict literals of these objects."""

from __future__ import annotations

from typing import Any

from autoclusters.names import Names
from autoclusters.providers.karpenter import NODEPOOL_LABEL

NAMES = Names()


def node(name: str, pool: str = "a", *, fault: tuple[str, str, str] | None = None, required: bool = False,
         approved: bool = False, ready: bool = True, since: str = "2026-01-01T00:00:00Z",
         cordoned: bool = False, degraded: bool = False, labels: dict[str, str] | None = None,
         detected: bool = True, annotations: dict[str, str] | None = None, boot_id: str = "",
         provider_id: str = "", created: str = "") -> dict[str, Any]:
    """A node of pool ``pool`` ("": none). ``detected``: the detector has written its GPU
    condition (``fault``, else none found); without it the node has only its Ready condition."""
    lab = {NAMES.pool_label: pool} if pool else {}
    lab.update(labels or {})
    if required:
        lab[NAMES.maintenance_required] = "true"
    if approved:
        lab[NAMES.maintenance_approved] = "true"
    conds: list[dict[str, Any]] = [{"type": "Ready", "status": "True" if ready else "False",
                                    "reason": "KubeletReady" if ready else "KubeletNotReady", "message": "ok"}]
    if fault:
        ctype, reason, message = fault
        conds.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                      "lastTransitionTime": since})
    elif detected:
        conds.append({"type": NAMES.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
                      "lastTransitionTime": since})
    if degraded:
        conds.append({"type": NAMES.detector_health_condition, "status": "True", "reason": "DcgmUnavailable"})
    spec: dict[str, Any] = {}
    if required:
        spec["taints"] = [{"key": NAMES.taint_key, "value": "true", "effect": "PreferNoSchedule"}]
    if cordoned:
        spec["unschedulable"] = True
    if provider_id:
        spec["providerID"] = provider_id
    meta: dict[str, Any] = {"name": name, "labels": lab, "annotations": dict(annotations or {}),
                            "resourceVersion": "7"}
    if created:
        meta["creationTimestamp"] = created
    status: dict[str, Any] = {"conditions": conds}
    if boot_id:
        status["nodeInfo"] = {"bootID": boot_id}
    return {"metadata": meta, "spec": spec, "status": status}


def pod(name: str, node_name: str, namespace: str = "default", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, phase: str = "Running",
        owner_kind: str = "", uid: str = "") -> dict[str, Any]:
    """A pod bound to ``node_name``; ``owner_kind``: its controller (a DaemonSet's pods stay put)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": f"{name}-owner", "controller": True}]
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase}}


def nodeclaim(name: str, nodepool: str, node_name: str = "", *, created: str = "",
              conditions: list[dict[str, Any]] | None = None, finalizer: bool = True) -> dict[str, Any]:
    """A Karpenter NodeClaim of ``nodepool`` that launched ``node_name`` (""): not yet)."""
    meta: dict[str, Any] = {"name": name, "labels": {NODEPOOL_LABEL: nodepool}}
    if finalizer:
        meta["finalizers"] = ["karpenter.sh/termination"]
    if created:
        meta["creationTimestamp"] = created
    status: dict[str, Any] = {"conditions": list(conditions or [])}
    if node_name:
        status.update(nodeName=node_name, providerID=f"kwok://{node_name}")
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "status": status}


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


def record(name: str, node_name: str, pool_name: str = "a", *, phase: str | None = "AwaitingApproval",
           created: str = "2026-01-01T00:00:00Z", completed: str | None = None, outcome: str = "",
           action: str = "reset", mode: str = "propose", replacement: str = "",
           steps: list[tuple[str, str, str]] | None = None, rv: str = "") -> dict[str, Any]:
    """A Remediation record of a Xid 79 on ``node_name``; ``phase`` None: not yet given one."""
    status: dict[str, Any] = {"created": created, "outcome": outcome,
                              "steps": [{"phase": p, "time": t, "message": m} for p, t, m in steps or []]}
    if phase is not None:
        status = {"phase": phase, **status}
    if completed:
        status["completed"] = completed
    if replacement:
        status["replacementNode"] = replacement
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if rv:
        meta["resourceVersion"] = rv
    return {"metadata": meta,
            "spec": {"node": node_name, "pool": pool_name, "consentMode": mode, "action": action,
                     "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                               "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)."}},
            "status": status}
