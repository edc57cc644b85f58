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

from autoclusters import api
from autoclusters.clock import utc_iso
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DEFAULT_NAMESPACE
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Conflict, Invalid, Kube, NotFound, load_kube
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
    """What the controller writes for a fault: the required label and the PreferNoSchedule taint.

    The taint goes in with a JSON patch guarded by a ``test`` of the resourceVersion; kwok's
    heartbeats change the node all the time, and a failed ``test`` comes back as 422 (Invalid),
    so the read-and-patch is retried.
    """
    kube.patch_node(node, {"metadata": {"labels": {names.maintenance_required: "true"}}})
    taint = {"key": names.taint_key, "value": "true", "effect": "PreferNoSchedule"}
    for attempt in range(10):
        obj = kube.get_node(node)
        taints = (obj.get("spec") or {}).get("taints")
        rv = obj["metadata"]["resourceVersion"]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]
        ops.append({"op": "add", "path": "/spec/taints/-", "value": taint} if taints is not None
                   else {"op": "add", "path": "/spec/taints", "value": [taint]})
        try:
            kube.patch_node(node, ops, JSON_PATCH)
            return
        except (Invalid, Conflict):
            if attempt == 9:
                raise


def unmark(kube: Kube, names: Names, node: str) -> None:
    """The controller's cleanup when a fault clears: both labels off (the taint is left; tests do not read it)."""
    with contextlib.suppress(NotFound):
        kube.patch_node(node, {"metadata": {"labels": {names.maintenance_required: None,
                                                       names.maintenance_approved: None}}})


def labels(kube: Kube, node: str) -> dict[str, str]:
    return dict(kube.get_node(node)["metadata"].get("labels") or {})


def node_events(kube: Kube, node: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [e for e in kube.list_items(f"/api/v1/namespaces/{namespace}/events",
                                 field_selector=f"involvedObject.kind=Node,involvedObject.name={node}")]


def cli(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs the real ``autoclusters`` entry point, as an operator's script would."""
    entry = "import sys; from autoclusters.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", entry, *args, "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, check=False)


@contextlib.contextmanager
def private_domain(cluster: ClusterHandle, suffix: str, *, install_crds: bool = True,
                   owner: str = "ops") -> Iterator[Names]:
    """Names under a domain of the caller's own (``<owner><suffix>.example.com``), with its
    own CRDs (or none), removed afterwards.

    A controller watches one domain's nodes, pools and records: the one deployed on a
    cluster a kubeconfig names watches the default domain, and the session's shared
    controller (the ``ctl`` fixture) watches a private domain of its own. A test that plays
    the controller itself, staging repair markers by hand, stages them under a private
    domain, where no controller acts on them; it also lets a test see a cluster where the
    CRDs are not installed at all.
    """
    from autoclusters.deploy.crds import crds

    names = Names(domain=f"{owner}{suffix}.example.com", prefix=f"{owner.capitalize()}Test")
    objs = crds(names) if install_crds else []
    if objs:
        cluster.apply(objs)
    try:
        yield names
    finally:
        for obj in objs:
            cluster.kube.delete_object(obj)
        cluster.kube.forget_discovery()


def create_record(kube: Kube, names: Names, state: Any) -> dict[str, Any]:
    """A ``Remediation`` exactly as the controller persists a ``RepairState`` (its own serializer)."""
    from autoclusters.controller import remediation_record

    kube.create(Kube.custom_path(names.api_group, api.VERSION, "remediations"),
                remediation_record.new_record(state, names))
    return kube.patch(Kube.custom_path(names.api_group, api.VERSION, "remediations", state.name) + "/status",
                      {"status": remediation_record.status_of(state)})


def create_pool(kube: Kube, names: Names, pool: str, mode: str, status: dict[str, Any] | None = None) -> None:
    from autoclusters.pools.pool_config import gpu_node_pool_object, pool_from_config

    obj = gpu_node_pool_object(pool_from_config({"name": pool, "consentMode": mode,
                                                 "provider": {"type": "simulated"}}), names)
    kube.create(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools"), obj)
    if status is not None:
        kube.patch(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools", pool) + "/status",
                   {"status": status})


def create_nodes(cluster: ClusterHandle, names: Names, pool: str, count: int) -> list[str]:
    """GPU nodes labelled with ``names`` (which may differ from the handle's default names)."""
    from autoclusters.sim import nodes as simnodes

    created = simnodes.create_gpu_nodes(cluster.kube, pool, count, names, prefix=pool)
    cluster.wait_nodes_ready(created)
    return created


def delete_pool_nodes(cluster: ClusterHandle, names: Names, pool: str) -> None:
    for node in cluster.kube.list_nodes(label_selector=f"{names.pool_label}={pool}"):
        with contextlib.suppress(NotFound):
            cluster.kube.delete(f"/api/v1/nodes/{node['metadata']['name']}")


@contextlib.contextmanager
def running_controller(cluster: ClusterHandle, names: Names, lease: str, log: Any,
                       extra: tuple[str, ...] = ()) -> Iterator[None]:
    """The real controller as a process, under ``names`` and a lease of its own, with short timings
    (``extra``: more ``controller run`` flags)."""
    import os

    env = dict(os.environ, AUTOCLUSTERS_DOMAIN=names.domain, AUTOCLUSTERS_CONDITION_PREFIX=names.prefix)
    with contextlib.suppress(Conflict):  # its Lease lives there; no earlier test has to have made it
        cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": DEFAULT_NAMESPACE}})
    entry = "import sys; from autoclusters.cli.main import main; sys.exit(main())"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", entry, "controller", "run", "--kubeconfig", cluster.kubeconfig,
             "--lease-name", lease, "--metrics-port", "0", "--sim-reset-seconds", "2", "--poll-seconds", "0.5",
             "--hold-recheck-seconds", "1", "--retry-period-seconds", "0.5", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
