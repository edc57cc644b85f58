"""Helpers for the operator-tool integration tests: act on nodes as the detector and the controller would.

The maintenance label is written with the controller's own identity (a service-account
token plus a ClusterRoleBinding created for the test), so the tests keep passing while an
admission policy that reserves that label for the controller is installed.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from autoclusters.clock import utc_iso
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube, NotFound, load_kube
from autoclusters.kube.client import JSON_PATCH
from autoclusters.names import Names

XID79 = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."


@contextlib.contextmanager
def controller_identity(cluster: ClusterHandle, suffix: str) -> Iterator[Kube]:
    """A client that acts as the autoclusters controller, allowed to patch nodes for the test's duration."""
    role = f"ops-test-node-writer-{suffix}"
    objs: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "list", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_SERVICE_ACCOUNT,
                       "namespace": DEFAULT_NAMESPACE}]},
    ]
    cluster.apply(objs)
    try:
        kubeconfig = cluster.service_account_kubeconfig(DEFAULT_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)
        yield load_kube(kubeconfig, user_agent="ops-tests-as-controller")
    finally:
        for obj in reversed(objs):
            cluster.kube.delete_object(obj)


def report_fault(kube: Kube, names: Names, node: str, message: str = XID79, reason: str = "NvidiaXIDError") -> None:
    """What the detector writes: the GPU fault condition, True."""
    now = utc_iso(datetime.now(UTC))
    kube.patch_node_status(node, {"status": {"conditions": [
        {"type": names.gpu_condition, "status": "True", "reason": reason, "message": message,
         "lastTransitionTime": now, "lastHeartbeatTime": now}]}})


def clear_fault(kube: Kube, names: Names, node: str) -> None:
    now = utc_iso(datetime.now(UTC))
    kube.patch_node_status(node, {"status": {"conditions": [
        {"type": names.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
         "message": "No GPU fault detected.", "lastTransitionTime": now, "lastHeartbeatTime": now}]}})


def mark(kube: Kube, names: Names, node: str) -> None:
    """What the controller writes for a fault: the required label and the PreferNoSchedule taint."""
    kube.patch_node(node, {"metadata": {"labels": {names.maintenance_required: "true"}}})
    obj = kube.get_node(node)
    taints = (obj.get("spec") or {}).get("taints")
    taint = {"key": names.taint_key, "value": "true", "effect": "PreferNoSchedule"}
    rv = obj["metadata"]["resourceVersion"]
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]
    ops.append({"op": "add", "path": "/spec/taints/-", "value": taint} if taints is not None
               else {"op": "add", "path": "/spec/taints", "value": [taint]})
    kube.patch_node(node, ops, JSON_PATCH)


def unmark(kube: Kube, names: Names, node: str) -> None:
    """The controller's cleanup when a fault clears: both labels off (the taint is left; tests do not read it)."""
    with contextlib.suppress(NotFound):
        kube.patch_node(node, {"metadata": {"labels": {names.maintenance_required: None,
                                                       names.maintenance_approved: None}}})


def labels(kube: Kube, node: str) -> dict[str, str]:
    return dict(kube.get_node(node)["metadata"].get("labels") or {})


def node_events(kube: Kube, node: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [e for e in kube.list(f"/api/v1/namespaces/{namespace}/events",
                                 field_selector=f"involvedObject.kind=Node,involvedObject.name={node}")]


def cli(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs the real ``autoclusters`` entry point, as an operator's script would."""
    return subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *args, "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, check=False)
