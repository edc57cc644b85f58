"""The admission policies that hold two identities to the fields their code writes, against
the real API server (deploy/patch_limits.py): the controller's pod patches change only the
warning's annotations, the Slurm bridge's node patches only its own annotations and
``spec.unschedulable``. Each identity is a service account of the test's own namespace holding
``patch`` of the whole object, so RBAC alone would let every refused change through."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, SLURM_BRIDGE_SERVICE_ACCOUNT
from autoclusters.deploy.patch_limits import (
    controller_pod_patch_policy,
    policy_binding,
    slurm_bridge_node_patch_policy,
)
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Forbidden, Kube, NotFound, load_kube

RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


class Scene:
    def __init__(self, cluster: ClusterHandle, suffix: str) -> None:
        self.cluster, self.names, self.suffix = cluster, cluster.names, suffix
        self.ns = f"plim-{suffix}"
        self.pod_policy, self.node_policy = f"plim-pods-{suffix}", f"plim-nodes-{suffix}"
        self.role = f"plim-writer-{suffix}"
        self.node = ""
        self.controller: Kube
        self.bridge: Kube

    @property
    def pod_path(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods/p"


@pytest.fixture(scope="module")
def scene(cluster: ClusterHandle) -> Iterator[Scene]:
    import secrets

    s = Scene(cluster, secrets.token_hex(3))
    try:
        controller_kc = cluster.service_account_kubeconfig(s.ns, CONTROLLER_SERVICE_ACCOUNT)
        bridge_kc = cluster.service_account_kubeconfig(s.ns, SLURM_BRIDGE_SERVICE_ACCOUNT)
        cluster.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": s.role},
             "rules": [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "patch", "update"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": s.role},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": s.role},
             "subjects": [{"kind": "ServiceAccount", "name": n, "namespace": s.ns}
                          for n in (CONTROLLER_SERVICE_ACCOUNT, SLURM_BRIDGE_SERVICE_ACCOUNT)]},
            controller_pod_patch_policy(s.names, s.ns, s.pod_policy), policy_binding(s.pod_policy),
            slurm_bridge_node_patch_policy(s.names, s.ns, s.node_policy), policy_binding(s.node_policy),
        ])
        cluster.kube.create(f"/api/v1/namespaces/{s.ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "train"}, "annotations": {"team": "research"}},
            "spec": {"serviceAccountName": CONTROLLER_SERVICE_ACCOUNT, "automountServiceAccountToken": False,
                     "nodeSelector": {"plim": "nowhere"},  # stays Pending: nothing changes it but the test
                     "containers": [{"name": "c", "image": "registry.invalid/train:1"}]}})
        (s.node,) = cluster.create_gpu_nodes(f"plim{s.suffix}", 1)
        s.controller, s.bridge = load_kube(controller_kc), load_kube(bridge_kc)
        yield s
    finally:
        for path in (f"{ADMISSION}/validatingadmissionpolicybindings/{s.pod_policy}",
                     f"{ADMISSION}/validatingadmissionpolicies/{s.pod_policy}",
                     f"{ADMISSION}/validatingadmissionpolicybindings/{s.node_policy}",
                     f"{ADMISSION}/validatingadmissionpolicies/{s.node_policy}",
                     f"{RBAC}/clusterrolebindings/{s.role}", f"{RBAC}/clusterroles/{s.role}",
                     *([f"/api/v1/nodes/{s.node}"] if s.node else []), f"/api/v1/namespaces/{s.ns}"):
            with contextlib.suppress(NotFound):
                cluster.kube.delete(path)


def _refused(write: Callable[[int], Any], words: str, timeout: float = 30) -> None:
    """``write(attempt)`` is refused by the policy. A policy just made reaches the API server's
    informer after a moment, so the first refusal is waited for; each attempt writes a value of
    its own, so one let through meanwhile does not make the next a no-op."""
    deadline = time.monotonic() + timeout
    for attempt in range(10**6):
        try:
            write(attempt)
        except Forbidden as e:
            assert words in str(e), str(e)
            return
        assert time.monotonic() < deadline, f"not refused after {timeout}s: {words}"
        time.sleep(0.3)
    raise AssertionError("unreachable")


def test_the_controllers_pod_patches_change_only_the_warning(scene: Scene) -> None:
    s, n = scene, scene.names
    refused_annotation = "may change only these annotations of a pod"

    def patch(body: dict[str, Any]) -> Any:
        return s.controller.patch(s.pod_path, body)

    _refused(lambda i: patch({"metadata": {"annotations": {"team": f"infra-{i}"}}}), refused_annotation)
    warning = {n.drain_deadline: "2026-12-02T03:00:00Z", n.drain_reason: "Xid 79", n.remediation: "r-1"}
    pod = patch({"metadata": {"annotations": warning}})
    assert {k: pod["metadata"]["annotations"][k] for k in warning} == warning
    pod = patch({"metadata": {"annotations": {n.drain_reason: None}}})
    assert n.drain_reason not in pod["metadata"]["annotations"]
    for body, words in (
            ({"metadata": {"annotations": {"team": None}}}, refused_annotation),
            ({"metadata": {"annotations": {f"{n.domain}/drain-ack": "r-1"}}}, refused_annotation),
            ({"metadata": {"labels": {"app": "other"}}}, "may not change a pod's labels"),
            ({"metadata": {"finalizers": ["example.com/hold"]}}, "may not change a pod's finalizers"),
            ({"spec": {"activeDeadlineSeconds": 60}}, "may not change a pod's spec")):
        with pytest.raises(Forbidden, match=words):
            patch(body)
    # the cluster's admin is not held to it
    assert s.cluster.kube.patch(s.pod_path, {"metadata": {"labels": {"app": "other"}}})["metadata"]["labels"] == {
        "app": "other"}


def test_the_bridges_node_patches_change_only_its_annotations_and_the_cordon(scene: Scene) -> None:
    s, n = scene, scene.names
    refused_annotation = "may change only these annotations of a node"

    def patch(body: dict[str, Any]) -> Any:
        return s.bridge.patch_node(s.node, body)

    _refused(lambda i: patch({"metadata": {"annotations": {n.remediation: f"forged-{i}"}}}), refused_annotation)
    own = dict.fromkeys(n.slurm_bridge_annotations, "x")
    node = patch({"metadata": {"annotations": own}, "spec": {"unschedulable": True}})
    assert {k: node["metadata"]["annotations"][k] for k in own} == own and node["spec"]["unschedulable"] is True
    node = patch({"metadata": {"annotations": dict.fromkeys(own)}, "spec": {"unschedulable": False}})
    assert not set(own) & set(node["metadata"].get("annotations") or {})
    for body, words in (
            ({"metadata": {"annotations": {n.drain_deadline: "2026-12-02T03:00:00Z"}}}, refused_annotation),
            ({"metadata": {"labels": {n.maintenance_approved: "true"}}}, "may not change a node's labels"),
            ({"metadata": {"labels": {"team": "x"}}}, "may not change a node's labels"),
            ({"spec": {"taints": [{"key": "example.com/hold", "effect": "NoSchedule"}]}},
             "may change only spec.unschedulable")):
        with pytest.raises(Forbidden, match=words):
            patch(body)
