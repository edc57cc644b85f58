"""The Cluster API provider against Cluster API's own CRDs (from the sigs.k8s.io/cluster-api
module, ``tools/build-tools.sh cluster-api``), in both served versions, in Cluster API's real
topology: the Machines in a management cluster, the nodes in the workload cluster.

The management cluster is a second kube-apiserver of the local cluster (the ``management``
fixture: the same etcd under another key prefix, so a separate cluster with its own objects
and RBAC, for one process and a few seconds). The provider reaches it through a kubeconfig
Secret in the workload cluster, as a user holding only the documented Machine rules. On a
cluster a kubeconfig names (AUTOCLUSTERS_TEST_KUBECONFIG) no second API server can be
started, and the Machines live in that cluster itself (a self-hosted Cluster API).

The objects are written as users have them: a Cluster, a MachineDeployment owning a
MachineSet owning Machines, each Machine's node carrying the annotations Cluster API
writes, and a MachineHealthCheck. The API server validates every one of them, and every
write the provider makes, against the real schemas. Cluster API's controllers do not run
here (docs/operations.md says why), so the test plays their part where the provider waits on
them: the old node's deletion and the new Machine's node.
"""

from __future__ import annotations

import base64
import contextlib
import math
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters.api import RepairAction
from autoclusters.clock import SystemClock
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Invalid, Kube, NotFound
from autoclusters.providers.base import ProviderError
from autoclusters.providers.clusterapi import (
    CLUSTERAPI_SECRET,
    MACHINE_ANNOTATION,
    MACHINE_RULES,
    NAMESPACE_ANNOTATION,
    SECRET_REREAD_SECONDS,
    ClusterApiProvider,
    ManagementCluster,
)
from autoclusters.providers.types import Operation, ProviderState
from tests.integration.helpers import upstream_crds

pytestmark = pytest.mark.integration
GROUP = "cluster.x-k8s.io"
CLUSTER = "gpu"
REMEDIATOR = "autoclusters-capi-remediator"  # the kubeconfig's user in the management cluster


@dataclass(frozen=True)
class Management:
    """Where the Machines live: ``handle``, and the kubeconfig of the identity the provider uses
    there (inline, as a Secret holds it; "" when the Machines are in the workload cluster)."""

    handle: ClusterHandle
    kubeconfig: str = ""
    issue: Callable[[str], str] | None = None  # a kubeconfig for another user of the management cluster


def inline_kubeconfig(server: str, ca: Path, crt: Path, key: Path, user: str) -> str:
    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "management",
        "clusters": [{"name": "management", "cluster": {"server": server, "certificate-authority-data": data(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": data(crt), "client-key-data": data(key)}}],
        "contexts": [{"name": "management", "context": {"cluster": "management", "user": user}}]})


@pytest.fixture(scope="session")
def management(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Management:
    """A management cluster of its own on the local cluster: a second kube-apiserver on the
    same etcd under its own key prefix (``LocalCluster.start_second_apiserver``: one process,
    a few seconds), with Cluster API's CRDs and a user that has only ``MACHINE_RULES``
    (a ClusterRole, as docs/operations.md tells users to grant). On a cluster a kubeconfig
    names no second API server can be started: there the Machines live in that cluster itself
    (a self-hosted Cluster API, ``managementCluster: self``)."""
    from autoclusters.devcluster.tools import cluster_api_crds

    if cluster.dev is None:
        upstream_crds(cluster, cluster_api_crds, f"/apis/{GROUP}/v1beta2", "Cluster API's")
        return Management(cluster)
    local = cluster.dev
    path = local.start_second_apiserver(
        "capi-management", progress=lambda msg: print(f"[cluster] {msg}", file=sys.stderr, flush=True))
    handle = ClusterHandle(str(path), local=True, state_dir=tmp_path_factory.mktemp("capi-management"))
    upstream_crds(handle, cluster_api_crds, f"/apis/{GROUP}/v1beta2", "Cluster API's")
    server = handle.kube.host
    handle.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": {"name": "autoclusters-machine-remediation"},
                  "rules": [{"apiGroups": [r.group], "resources": [r.resource], "verbs": list(r.verbs)}
                            for r in MACHINE_RULES]})

    def issue(user: str) -> str:
        crt, key = local.pki.issue(user, user)
        return inline_kubeconfig(server, local.pki.ca_cert, crt, key, user)

    handle.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                  "metadata": {"name": "autoclusters-machine-remediation"},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": "autoclusters-machine-remediation"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": REMEDIATOR}]})
    return Management(handle, issue(REMEDIATOR), issue)


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
    """One test's Cluster API objects in the management cluster (namespace ``ns``), its nodes in
    the workload cluster, and the kubeconfig Secret in the workload cluster's namespace ``ns``
    (the controller's namespace, for the provider under test)."""

    def __init__(self, workload: ClusterHandle, management: Management, version: str, unique: str) -> None:
        self.h, self.m, self.v = workload, management, version
        self.kube = management.handle.kube  # the Machines
        self.ns = f"capi-{version}-{unique}"
        for kube in {id(k): k for k in (self.kube, workload.kube)}.values():
            kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": self.ns}})
        if management.kubeconfig:
            self.secret(management.kubeconfig)

    def secret(self, kubeconfig: str) -> None:
        body = {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": CLUSTERAPI_SECRET, "namespace": self.ns},
                "data": {"value": base64.b64encode(kubeconfig.encode()).decode()}}
        self.h.apply(body)

    def provider(self, version: str | None = None, reread_seconds: float = SECRET_REREAD_SECONDS
                 ) -> ClusterApiProvider:
        """The provider as a pool with ``managementCluster: secret`` builds it (``self`` where the
        Machines are in the workload cluster)."""
        kube, clock = self.h.kube, SystemClock()
        mc = ManagementCluster(kube, clock, namespace=self.ns, reread_seconds=reread_seconds) \
            if self.m.kubeconfig else None
        return ClusterApiProvider(kube, clock, self.h.names, version=version or self.v, management=mc)

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
            self.h.kube.patch_node(node, {"metadata": {"annotations": {
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
        for kube in {id(k): k for k in (self.kube, self.h.kube)}.values():
            with contextlib.suppress(NotFound):
                kube.delete(f"/api/v1/namespaces/{self.ns}")


@pytest.fixture(params=["v1beta2", "v1beta1"])
def capi(request: pytest.FixtureRequest, cluster: ClusterHandle, management: Management,
         unique: str) -> Iterator[CapiWorld]:
    w = CapiWorld(cluster, management, request.param, unique)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture()
def capi_v1beta2(cluster: ClusterHandle, management: Management, unique: str) -> Iterator[CapiWorld]:
    """For what does not depend on the objects' version (discovery, RBAC): one world, in v1beta2."""
    w = CapiWorld(cluster, management, "v1beta2", unique)
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


def test_the_provider_speaks_v1beta2_by_default_as_cluster_api_serves_it(capi_v1beta2: CapiWorld) -> None:
    """Read from the management cluster's discovery of the real CRDs (both versions served,
    v1beta2 stored), through the kubeconfig of the Secret."""
    assert capi_v1beta2.provider().served_version() == "v1beta2"
    assert capi_v1beta2.provider(version="v1beta1").served_version() == "v1beta1"


def test_reset_deletes_the_machine_and_is_done_only_as_a_replacement(capi: CapiWorld, unique: str) -> None:
    """Cluster API's MachineHealthCheck remediation deletes the Machine, so a reset does: in the
    management cluster, with the Secret's identity. A new boot id of the old node name is no
    success; the old node gone and a new Ready node of the pool claimed is."""
    pool = f"capi-{unique}"
    nodes = capi.h.create_gpu_nodes(pool, 2, prefix=pool)
    machines = capi.build(nodes)
    node = nodes[0]
    machine = machines[node]["metadata"]["name"]
    boot = capi.h.kube.get_node(node)["status"]["nodeInfo"]["bootID"]
    prov = capi.provider()
    time.sleep(1 - time.time() % 1)  # the repair begins in a later second than the pool's nodes (see below)
    op = Operation(f"rec-{unique}-1", RepairAction.RESET, datetime.now(UTC), boot_id_before=boot)
    assert prov.progress(op, node, pool, lookup(capi.h.kube)).state == ProviderState.NOT_STARTED
    prov.drive(op, node, pool)
    prov.drive(op, node, pool)  # a retried drive: nothing to delete, no error
    with pytest.raises(NotFound):
        capi.kube.get(capi.path("machines", machine))
    assert capi.kube.get(capi.path("machines", machines[nodes[1]]["metadata"]["name"]))  # the other one stays
    capi.h.kube.patch_node_status(node, {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}})
    view = prov.progress(op, node, pool, lookup(capi.h.kube))
    assert view.state == ProviderState.RUNNING and f"node {node} still exists" in view.message  # a boot is no proof
    capi.h.kube.delete(f"/api/v1/nodes/{node}")  # what Cluster API does next: the node deleted ...
    time.sleep(max(0.0, math.floor(op.started.timestamp()) + 1 - time.time()))
    (new,) = capi.h.create_gpu_nodes(pool, 1, prefix=f"{pool}-new")  # ... and the new Machine's node
    capi.h.kube.patch_node(new, {"metadata": {"annotations": {MACHINE_ANNOTATION: "gpu-md-x7k2p-new",
                                                              NAMESPACE_ANNOTATION: capi.ns}}})
    prov.drive(op, node, pool)
    done = prov.progress(op, node, pool, lookup(capi.h.kube))
    assert (done.state, done.new_node) == (ProviderState.SUCCEEDED, new)


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
    prov = capi.provider()
    # The repair begins after the pool's nodes exist, in a later second (creation times have
    # second precision): the nodes already there are never taken for the replacement.
    time.sleep(1 - time.time() % 1)
    op = Operation(f"rec-{unique}-1", RepairAction.REPLACE, datetime.now(UTC))
    assert prov.progress(op, node, pool, lookup(capi.h.kube)).state == ProviderState.NOT_STARTED
    prov.drive(op, node, pool)
    with pytest.raises(NotFound):
        capi.kube.get(capi.path("machines", machine))
    # No Cluster API controller here: the Machine went at once, its node is still there.
    view = prov.progress(op, node, pool, lookup(capi.h.kube))
    assert view.state == ProviderState.RUNNING and f"node {node} still exists" in view.message
    prov.drive(op, node, pool)  # again: nothing to delete, no error
    assert capi.kube.get(capi.path("machines", machines[nodes[0]]["metadata"]["name"]))  # the other one stays
    assert capi.kube.get(capi.path("machinesets", "gpu-md-x7k2p"))["spec"]["replicas"] == 2  # its owner restores it
    assert capi.kube.get(capi.path("machinedeployments", "gpu-md"))
    # What Cluster API does next: the old node deleted, a new Machine with its node.
    capi.h.kube.delete(f"/api/v1/nodes/{node}")
    view = prov.progress(op, node, pool, lookup(capi.h.kube))
    assert view.state == ProviderState.RUNNING and "waiting for a new Ready node" in view.message
    # The new Machine's node registers in a later second than the repair's start, as a real one
    # does (a node of the start's own second may predate it and is never a replacement).
    time.sleep(max(0.0, math.floor(op.started.timestamp()) + 1 - time.time()))
    (new,) = capi.h.create_gpu_nodes(pool, 1, prefix=f"{pool}-new")
    capi.h.kube.patch_node(new, {"metadata": {"annotations": {MACHINE_ANNOTATION: "gpu-md-x7k2p-new",
                                                              NAMESPACE_ANNOTATION: capi.ns}}})
    # A second replacement in the pool, its Machine and node gone too: one new node serves one of them.
    other = Operation(f"rec-{unique}-2", RepairAction.REPLACE, op.started)
    prov.drive(other, nodes[0], pool)
    capi.h.kube.delete(f"/api/v1/nodes/{nodes[0]}")
    prov.drive(op, node, pool)
    prov.drive(other, nodes[0], pool)
    done = prov.progress(op, node, pool, lookup(capi.h.kube))
    assert (done.state, done.new_node) == (ProviderState.SUCCEEDED, new)
    assert capi.h.kube.get_node(new)["metadata"]["annotations"][prov.operation_annotation] == op.id
    waiting = prov.progress(other, nodes[0], pool, lookup(capi.h.kube))
    assert waiting.state == ProviderState.RUNNING and "waiting for a new Ready node" in waiting.message


def test_an_identity_without_the_machine_rules_fails_and_a_rotated_kubeconfig_is_used(
        capi_v1beta2: CapiWorld, unique: str) -> None:
    """The management cluster's own RBAC decides: a kubeconfig whose user has no rights there
    fails the operation with the API server's answer; the Secret rotated to the remediation
    user's kubeconfig is read again, and the same provider deletes the Machine."""
    capi = capi_v1beta2
    if capi.m.issue is None:
        pytest.skip("needs a management cluster of the tests' own (the local cluster's second API server)")
    pool = f"capi-{unique}"
    nodes = capi.h.create_gpu_nodes(pool, 1, prefix=pool)
    machines = capi.build(nodes)
    capi.secret(capi.m.issue(f"nobody-{unique}"))
    prov = capi.provider(reread_seconds=0)
    op = Operation(f"rec-{unique}-1", RepairAction.RESET, datetime.now(UTC))
    view = prov.progress(op, nodes[0], pool, lookup(capi.h.kube))
    assert view.state == ProviderState.FAILED, view
    assert "refused to read Machine" in view.message and f"nobody-{unique}" in view.message
    with pytest.raises(ProviderError, match="forbidden"):
        prov.drive(op, nodes[0], pool)
    capi.secret(capi.m.kubeconfig)  # rotated
    prov.drive(op, nodes[0], pool)
    with pytest.raises(NotFound):
        capi.kube.get(capi.path("machines", machines[nodes[0]]["metadata"]["name"]))
