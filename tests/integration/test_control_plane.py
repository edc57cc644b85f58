"""The local control plane has real Kubernetes semantics (issue 2's acceptance).

Each test works in its own namespace / pool so the suite can share one cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Forbidden, Invalid, Kube, TooManyRequests
from autoclusters.kube.client import MERGE
from autoclusters.kube.objects import node_ready
from tests.integration.helpers import kubectl, wait_for


@pytest.fixture()
def namespace(kube: Kube, unique: str) -> Iterator[str]:
    ns = f"cp-{unique}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield ns
    kube.delete(f"/api/v1/namespaces/{ns}")


def _gpu_pod(name: str, pool: str, cluster: ClusterHandle, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeSelector": {cluster.names.pool_label: pool},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "train", "image": "example.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }


def test_kwok_gpu_node_becomes_ready_with_gpu_capacity(cluster: ClusterHandle, unique: str) -> None:
    pool = f"cp-{unique}"
    [name] = cluster.create_gpu_nodes(pool, 1)
    node = cluster.kube.get_node(name)
    assert node_ready(node)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"][cluster.names.pool_label] == pool
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"].endswith(".8x")


def test_pod_is_scheduled_on_the_gpu_node_and_runs(cluster: ClusterHandle, namespace: str, unique: str) -> None:
    pool = f"cp-{unique}"
    [node] = cluster.create_gpu_nodes(pool, 1)
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/pods", _gpu_pod("trainer", pool, cluster))

    def running() -> dict[str, Any] | None:
        pod = cluster.kube.get(f"/api/v1/namespaces/{namespace}/pods/trainer")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    pod = wait_for("pod Running", running, timeout=60)
    assert pod["spec"]["nodeName"] == node
    # A second 8-GPU pod does not fit the node: the scheduler must leave it Pending. Its sign
    # that it tried and decided: the PodScheduled condition False, reason Unschedulable
    # (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions).
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/pods", _gpu_pod("second", pool, cluster))

    def unschedulable() -> dict[str, Any] | None:
        pod = cluster.kube.get(f"/api/v1/namespaces/{namespace}/pods/second")
        conds = (pod.get("status") or {}).get("conditions") or []
        return pod if any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable" for c in conds) else None

    second = wait_for("the scheduler's Unschedulable on the second pod", unschedulable, timeout=30)
    assert second["status"]["phase"] == "Pending"
    assert not second["spec"].get("nodeName")


def test_eviction_blocked_by_pdb_gets_429(cluster: ClusterHandle, namespace: str, unique: str) -> None:
    pool = f"cp-{unique}"
    cluster.create_gpu_nodes(pool, 1)
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/pods",
                        _gpu_pod("guarded", pool, cluster, labels={"app": "guarded"}))
    cluster.kube.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})

    def pdb_observed() -> bool:
        pdb = cluster.kube.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/guard")
        st = pdb.get("status") or {}
        return st.get("observedGeneration") == pdb["metadata"]["generation"] and st.get("currentHealthy") == 1

    wait_for("PDB status from the disruption controller", pdb_observed, timeout=60)
    with pytest.raises(TooManyRequests) as err:
        cluster.kube.evict(namespace, "guarded")
    assert err.value.status == 429
    assert "disruption budget" in str(err.value).lower()


def test_validating_admission_policy_rejects_forbidden_node_label(cluster: ClusterHandle, unique: str) -> None:
    pool = f"cp-{unique}"
    [node] = cluster.create_gpu_nodes(pool, 1)
    key = f"forbidden-{unique}.test.autoclusters.io/x"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"cp-test-{unique}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["nodes"]}]},
            "validations": [{"expression": f"!has(object.metadata.labels) || !('{key}' in object.metadata.labels)",
                             "message": f"label {key} is forbidden"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"cp-test-{unique}"},
        "spec": {"policyName": f"cp-test-{unique}", "validationActions": ["Deny"]},
    }
    cluster.apply([policy, binding])
    try:
        def rejected() -> str | None:
            try:
                cluster.kube.patch_node(node, {"metadata": {"labels": {key: "1"}}}, MERGE)
            except (Forbidden, Invalid) as e:
                return str(e)
            cluster.kube.patch_node(node, {"metadata": {"labels": {key: None}}}, MERGE)
            return None

        message = wait_for("the policy to take effect", rejected, timeout=30)
        assert f"label {key} is forbidden" in message
        # Other label changes still pass.
        cluster.kube.patch_node(node, {"metadata": {"labels": {"allowed.test/x": unique}}}, MERGE)
    finally:
        cluster.kube.delete_object(binding)
        cluster.kube.delete_object(policy)


def test_event_written_is_readable_with_kubectl(cluster: ClusterHandle, namespace: str, unique: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"test-{unique}"},
        "involvedObject": {"kind": "ConfigMap", "name": "demo", "namespace": namespace, "apiVersion": "v1"},
        "reason": "AutoclustersTest", "message": f"hello {unique}", "type": "Normal",
        "source": {"component": "autoclusters-tests"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    })
    out = kubectl(cluster.kubeconfig, "get", "events", "-n", namespace, "-o", "json")
    events = json.loads(out)["items"]
    assert any(e["reason"] == "AutoclustersTest" and e["message"] == f"hello {unique}" for e in events)
    table = kubectl(cluster.kubeconfig, "get", "events", "-n", namespace)
    assert "AutoclustersTest" in table


def test_kubectl_is_a_real_client(cluster: ClusterHandle) -> None:
    out = kubectl(cluster.kubeconfig, "version", "-o", "json")
    server = json.loads(out)["serverVersion"]
    assert server["major"] == "1"
    with pytest.raises(subprocess.CalledProcessError):
        kubectl(cluster.kubeconfig, "get", "nodes", "no-such-node-xyz")
