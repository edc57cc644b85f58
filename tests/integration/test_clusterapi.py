"""The Cluster API provider against Cluster API's own CRDs (from the sigs.k8s.io/cluster-api
module, ``tools/build-tools.sh cluster-api``), in both served versions.

The objects are written as users have them: a Cluster, a MachineDeployment owning a
MachineSet owning Machines, each Machine's node carrying the annotations Cluster API
writes, and a MachineHealthCheck (which is what acts on the remediation annotation). The
API server validates every one of them, and every write the provider makes, against the
real schemas. Cluster API's controllers do not run here (docs/operations.md says why), so
the test plays their part where the provider waits on them: a new boot id after a reset.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.clock import SystemClock
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Invalid, Kube, NotFound
from autoclusters.providers.clusterapi import (
    MACHINE_ANNOTATION,
    NAMESPACE_ANNOTATION,
    REMEDIATE_ANNOTATION,
    ClusterApiProvider,
)
from autoclusters.providers.types import Operation, ProviderState
from tests.integration.helpers import upstream_crds

pytestmark = pytest.mark.integration
GROUP = "cluster.x-k8s.io"
CLUSTER = "gpu"


@pytest.fixture(scope="session")
def cluster_api(cluster: ClusterHandle) -> ClusterHandle:
    """Cluster API's CRDs on the cluster (``helpers.upstream_crds``)."""
    from autoclusters.devcluster.tools import cluster_api_crds

    upstream_crds(cluster, cluster_api_crds, f"/apis/{GROUP}/v1beta2", "Cluster API's")
    return cluster


def ref(version: str, group: str, kind: str, name: str) -> dict[str, str]:
    """An object reference as each version spells it (v1beta2: apiGroup; v1beta1: apiVersion)."""
    if version == "v1beta2":
        return {"apiGroup": group, "kind": kind, "name": name}
    return {"apiVersion": f"{group}/v1beta1", "kind": kind, "name": name}


def machine_spec(version: str, name: str) -> dict[str, Any]:
    return {"clusterName": CLUSTER, "version": "v1.34.4",
            "bootstrap": {"configRef": ref(version, "bootstrap.cluster.x-k8s.io", "KubeadmConfig", name)},
            "infrastructureRef": ref(version, "infrastructure.cluster.x-k8s.io", "DockerMachine", name)}


class CapiWorld:
    def __init__(self, handle: ClusterHandle, version: str, unique: str) -> None:
        self.h, self.kube, self.v = handle, handle.kube, version
        self.ns = f"capi-{version}-{unique}"
        self.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": self.ns}})

    def path(self, plural: str, name: str | None = None, version: str | None = None) -> str:
        return Kube.custom_path(GROUP, version or self.v, plural, name, self.ns)

    def create(self, plural: str, kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{self.v}", "kind": kind,
                "metadata": {"name": name, "namespace": self.ns, **meta}, "spec": spec}
        return self.kube.create(self.path(plural), body)

    def owner(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def build(self, nodes: list[str]) -> dict[str, Any]:
        """Cluster -> MachineDeployment -> MachineSet -> one Machine per node, and an MHC."""
        labels = {"cluster.x-k8s.io/cluster-name": CLUSTER, "cluster.x-k8s.io/deployment-name": "gpu-md"}
        self.create("clusters", "Cluster", CLUSTER, {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}})
        template = {"metadata": {"labels": labels}, "spec": machine_spec(self.v, "gpu-md")}
        md = self.create("machinedeployments", "MachineDeployment", "gpu-md", {
            "clusterName": CLUSTER, "replicas": len(nodes), "selector": {"matchLabels": labels},
            "template": template}, labels=labels)
        ms = self.create("machinesets", "MachineSet", "gpu-md-x7k2p", {
            "clusterName": CLUSTER, "replicas": len(nodes), "selector": {"matchLabels": labels},
            "template": template}, labels={**labels, "cluster.x-k8s.io/set-name": "gpu-md-x7k2p"},
            ownerReferences=[self.owner(md)])
        machines = {}
        for i, node in enumerate(nodes):
            spec = {**machine_spec(self.v, f"gpu-md-x7k2p-{i}"), "providerID": f"kwok://{node}"}
            spec["bootstrap"] = {"dataSecretName": f"gpu-md-x7k2p-{i}-bootstrap"}
            m = self.create("machines", "Machine", f"gpu-md-x7k2p-{i}", spec,
                            labels={**labels, "cluster.x-k8s.io/set-name": "gpu-md-x7k2p"},
                            ownerReferences=[self.owner(ms)])
            node_ref = {"name": node} if self.v == "v1beta2" else {"apiVersion": "v1", "kind": "Node", "name": node}
            self.kube.patch(self.path("machines", m["metadata"]["name"]) + "/status",
                            {"status": {"nodeRef": node_ref, "phase": "Running"}})
            self.kube.patch_node(node, {"metadata": {"annotations": {
                MACHINE_ANNOTATION: m["metadata"]["name"], NAMESPACE_ANNOTATION: self.ns,
                "cluster.x-k8s.io/cluster-name": CLUSTER, "cluster.x-k8s.io/owner-kind": "MachineSet",
                "cluster.x-k8s.io/owner-name": "gpu-md-x7k2p"}}})
            machines[node] = m
        mhc_spec: dict[str, Any] = {"clusterName": CLUSTER, "selector": {"matchLabels": labels}}
        if self.v == "v1beta2":
            mhc_spec["checks"] = {"unhealthyNodeConditions": [
                {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}]}
        else:
            mhc_spec["unhealthyConditions"] = [{"type": "Ready", "status": "Unknown", "timeout": "300s"}]
        self.create("machinehealthchecks", "MachineHealthCheck", "gpu-md-unhealthy", mhc_spec)
        return machines

    def close(self) -> None:
        with contextlib.suppress(NotFound):
            self.kube.delete(f"/api/v1/namespaces/{self.ns}")


@pytest.fixture(params=["v1beta2", "v1beta1"])
def capi(request: pytest.FixtureRequest, cluster_api: ClusterHandle, unique: str) -> Iterator[CapiWorld]:
    w = CapiWorld(cluster_api, request.param, unique)
    try:
        yield w
    finally:
        w.close()


def lookup(kube: Kube) -> Callable[[str], dict[str, Any] | None]:
    def get(name: str) -> dict[str, Any] | None:
        try:
            return kube.get_node(name)
        except NotFound:
            return None
    return get


def test_the_schema_is_the_real_one(capi: CapiWorld) -> None:
    """A Machine without its required fields is refused: the CRDs validate, nothing is open."""
    with pytest.raises(Invalid, match=r"clusterName|bootstrap|infrastructureRef"):
        capi.create("machines", "Machine", "incomplete", {"version": "v1.34.4"})


def test_the_provider_speaks_v1beta2_by_default_as_cluster_api_serves_it(cluster_api: ClusterHandle) -> None:
    """Read from the API server's discovery of the real CRDs (both versions served, v1beta2 stored)."""
    prov = ClusterApiProvider(cluster_api.kube, SystemClock(), cluster_api.names)
    assert prov.served_version() == "v1beta2"
    assert ClusterApiProvider(cluster_api.kube, SystemClock(), cluster_api.names,
                              version="v1beta1").served_version() == "v1beta1"


def test_reset_sets_the_remediation_annotation_then_waits_for_a_new_boot(capi: CapiWorld, unique: str) -> None:
    pool = f"capi-{unique}"
    nodes = capi.h.create_gpu_nodes(pool, 2, prefix=pool)
    machines = capi.build(nodes)
    node = nodes[0]
    machine = machines[node]["metadata"]["name"]
    boot = capi.kube.get_node(node)["status"]["nodeInfo"]["bootID"]
    prov = ClusterApiProvider(capi.kube, SystemClock(), capi.h.names, version=capi.v)
    op = Operation(f"rec-{unique}-1", RepairAction.RESET, datetime.now(UTC), boot_id_before=boot)
    assert prov.progress(op, node, pool, lookup(capi.kube)).state == ProviderState.NOT_STARTED
    prov.drive(op, node, pool)
    prov.drive(op, node, pool)  # a retried drive writes nothing new
    for version in ("v1beta1", "v1beta2"):  # stored once, readable in both versions
        ann = capi.kube.get(capi.path("machines", machine, version))["metadata"]["annotations"]
        assert ann[capi.h.names.operation_annotation] == op.id and REMEDIATE_ANNOTATION in ann
    assert prov.progress(op, node, pool, lookup(capi.kube)).state == ProviderState.RUNNING
    # What the owning controller's remediation does, as the node sees it: a new boot.
    capi.kube.patch_node_status(node, {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}})
    assert prov.progress(op, node, pool, lookup(capi.kube)).state == ProviderState.SUCCEEDED
    other = capi.kube.get(capi.path("machines", machines[nodes[1]]["metadata"]["name"]))
    assert REMEDIATE_ANNOTATION not in (other["metadata"].get("annotations") or {})


def test_replace_is_done_once_the_machine_and_its_node_are_gone_and_a_new_node_is_matched(
        capi: CapiWorld, unique: str) -> None:
    """Deleting the Machine starts the replacement; it is not done while the old node exists
    (Cluster API deletes it as part of the Machine's deletion, or gives up after the Machine's
    nodeDeletionTimeout) nor before the MachineSet's new Machine brings a Ready node of the
    pool, which is matched to this operation and to no other."""
    pool = f"capi-{unique}"
    nodes = capi.h.create_gpu_nodes(pool, 2, prefix=pool)
    machines = capi.build(nodes)
    node = nodes[1]
    machine = machines[node]["metadata"]["name"]
    prov = ClusterApiProvider(capi.kube, SystemClock(), capi.h.names, version=capi.v)
    # The repair begins after the pool's nodes exist, in a later second (creation times have
    # second precision): the nodes already there are never taken for the replacement.
    time.sleep(1 - time.time() % 1)
    op = Operation(f"rec-{unique}-1", RepairAction.REPLACE, datetime.now(UTC))
    assert prov.progress(op, node, pool, lookup(capi.kube)).state == ProviderState.NOT_STARTED
    prov.drive(op, node, pool)
    with pytest.raises(NotFound):
        capi.kube.get(capi.path("machines", machine))
    # No Cluster API controller here: the Machine went at once, its node is still there.
    view = prov.progress(op, node, pool, lookup(capi.kube))
    assert view.state == ProviderState.RUNNING and f"node {node} still exists" in view.message
    prov.drive(op, node, pool)  # again: nothing to delete, no error
    assert capi.kube.get(capi.path("machines", machines[nodes[0]]["metadata"]["name"]))  # the other one stays
    assert capi.kube.get(capi.path("machinesets", "gpu-md-x7k2p"))["spec"]["replicas"] == 2  # its owner restores it
    assert capi.kube.get(capi.path("machinedeployments", "gpu-md"))
    # What Cluster API does next: the old node deleted, a new Machine with its node.
    capi.kube.delete(f"/api/v1/nodes/{node}")
    view = prov.progress(op, node, pool, lookup(capi.kube))
    assert view.state == ProviderState.RUNNING and "waiting for a new Ready node" in view.message
    # The new Machine's node registers in a later second than the repair's start, as a real one
    # does (a node of the start's own second may predate it and is never a replacement).
    time.sleep(max(0.0, math.floor(op.started.timestamp()) + 1 - time.time()))
    (new,) = capi.h.create_gpu_nodes(pool, 1, prefix=f"{pool}-new")
    capi.kube.patch_node(new, {"metadata": {"annotations": {MACHINE_ANNOTATION: "gpu-md-x7k2p-new",
                                                            NAMESPACE_ANNOTATION: capi.ns}}})
    # A second replacement in the pool, its Machine and node gone too: one new node serves one of them.
    other = Operation(f"rec-{unique}-2", RepairAction.REPLACE, op.started)
    prov.drive(other, nodes[0], pool)
    capi.kube.delete(f"/api/v1/nodes/{nodes[0]}")
    prov.drive(op, node, pool)
    prov.drive(other, nodes[0], pool)
    done = prov.progress(op, node, pool, lookup(capi.kube))
    assert (done.state, done.new_node) == (ProviderState.SUCCEEDED, new)
    assert capi.kube.get_node(new)["metadata"]["annotations"][prov.operation_annotation] == op.id
    waiting = prov.progress(other, nodes[0], pool, lookup(capi.kube))
    assert waiting.state == ProviderState.RUNNING and "waiting for a new Ready node" in waiting.message
