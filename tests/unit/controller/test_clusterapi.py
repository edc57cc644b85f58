"""The Cluster API provider's object handling: the Machine a node names, the replacement rule, reset
carried out as a replacement, and the Machines in a management cluster of their own."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.pools.pool_config import pool_from_config
from autoclusters.providers.base import ProviderError
from autoclusters.providers.clusterapi import (
    CLUSTERAPI_SECRET,
    MACHINE_ANNOTATION,
    NAMESPACE_ANNOTATION,
    SECRET_REREAD_SECONDS,
    ClusterApiProvider,
    ManagementCluster,
    machine_ref,
)
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from tests.unit.fakeapi import ApiError, FakeApi

JSON = dict[str, Any]

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_capi_machine_ref() -> None:
    node = {"metadata": {"annotations": {"cluster.x-k8s.io/machine": "m-1",
                                         "cluster.x-k8s.io/cluster-namespace": "capi"}}}
    ref = machine_ref(node)
    assert ref is not None and ref.path() == "/apis/cluster.x-k8s.io/v1beta2/namespaces/capi/machines/m-1"
    assert machine_ref({"metadata": {}}) is None


# --- the replace rule, against the fake API server ---------------------------------------------
NAMES = Names()
NS = "capi"
MACHINES = "/apis/cluster.x-k8s.io/v1beta2/namespaces/capi/machines"


class World:
    """Nodes of pool ``p`` with their Machines; the clock moves only when told."""

    def __init__(self, machines: str = MACHINES) -> None:
        self.clock = FakeClock(T)
        self.api = FakeApi(clock=self.clock.now)
        self.kube = self.api.kube()
        self.prov = ClusterApiProvider(self.kube, self.clock, NAMES)
        self.machines = machines

    def node(self, name: str, machine: str, ready: bool = True) -> None:
        self.api.put(self.machines, {"metadata": {"name": machine, "namespace": NS}, "spec": {}})
        self.api.put("/api/v1/nodes", {"metadata": {
            "name": name, "labels": {NAMES.pool_label: "p"},
            "annotations": {MACHINE_ANNOTATION: machine, NAMESPACE_ANNOTATION: NS}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})

    def lookup(self, name: str) -> JSON | None:
        return self.api.read(f"/api/v1/nodes/{name}")

    def step(self, op: Operation, node: str) -> ProviderView:
        """One reconcile's worth: what the controller observes, then what it drives."""
        view = self.prov.progress(op, node, "p", self.lookup)
        self.prov.drive(op, node, "p")
        return view


def test_replace_is_not_done_while_the_old_node_exists_though_its_machine_is_gone() -> None:
    w = World()
    w.node("old", "m-old")
    w.clock.advance(5)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    assert w.step(op, "old").state == ProviderState.NOT_STARTED
    assert w.api.read(f"{MACHINES}/m-old") is None  # the drive deleted it
    w.clock.advance(5)
    w.node("new", "m-new")  # the MachineSet's new Machine and its node
    view = w.step(op, "old")
    assert view.state == ProviderState.RUNNING and "node old still exists" in view.message  # not Succeeded
    w.api.remove("/api/v1/nodes/old")  # Cluster API deletes the node
    done = w.prov.progress(op, "old", "p", w.lookup)
    assert (done.state, done.new_node) == (ProviderState.SUCCEEDED, "new")


def test_replace_waits_for_a_ready_new_node_of_the_pool() -> None:
    w = World()
    w.node("old", "m-old")
    w.clock.advance(5)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    w.step(op, "old")
    w.api.remove("/api/v1/nodes/old")
    view = w.step(op, "old")
    assert view.state == ProviderState.RUNNING and "waiting for a new Ready node of pool p" in view.message
    w.clock.advance(5)
    w.node("booting", "m-new", ready=False)
    assert w.step(op, "old").state == ProviderState.RUNNING  # not Ready: not claimed
    w.api.edit("/api/v1/nodes/booting", lambda n: n["status"].update(
        conditions=[{"type": "Ready", "status": "True"}]))
    w.step(op, "old")
    assert w.prov.progress(op, "old", "p", w.lookup).new_node == "booting"


def test_a_node_that_existed_before_the_repair_or_is_not_from_cluster_api_is_never_the_replacement() -> None:
    w = World()
    w.node("old", "m-old")
    w.node("neighbour", "m-neighbour")
    w.clock.advance(5)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    w.step(op, "old")
    w.api.remove("/api/v1/nodes/old")
    w.clock.advance(5)
    w.api.put("/api/v1/nodes", {"metadata": {"name": "stray", "labels": {NAMES.pool_label: "p"}},
                                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert w.step(op, "old").state == ProviderState.RUNNING
    assert w.step(op, "old").state == ProviderState.RUNNING
    ann = (w.lookup("neighbour") or {})["metadata"]["annotations"]
    assert w.prov.operation_annotation not in ann


def test_two_replacements_never_count_one_new_node() -> None:
    w = World()
    w.node("a", "m-a")
    w.node("b", "m-b")
    w.clock.advance(5)
    op_a = Operation("r-a", RepairAction.REPLACE, w.clock.now())
    op_b = Operation("r-b", RepairAction.REPLACE, w.clock.now())
    other = ClusterApiProvider(w.kube, w.clock, NAMES)  # e.g. a restarted controller's provider
    w.step(op_a, "a")
    other.progress(op_b, "b", "p", w.lookup)
    other.drive(op_b, "b", "p")
    w.api.remove("/api/v1/nodes/a")
    w.api.remove("/api/v1/nodes/b")
    w.clock.advance(5)
    w.node("new", "m-new")
    w.prov.drive(op_a, "a", "p")
    other.drive(op_b, "b", "p")
    views = [w.prov.progress(op_a, "a", "p", w.lookup), other.progress(op_b, "b", "p", w.lookup)]
    assert [v.state for v in views] == [ProviderState.SUCCEEDED, ProviderState.RUNNING]
    assert views[0].new_node == "new"


def test_v1beta2_by_default_and_v1beta1_where_only_that_is_served() -> None:
    assert pool_from_config({"name": "p", "provider": {"type": "clusterapi"}}).provider.to_dict() == {
        "type": "clusterapi", "clusterapi": {"version": "v1beta2", "managementCluster": "self",
                                             "kubeconfigKey": "value"}}
    w = World()
    w.node("n", "m")
    assert w.prov.served_version() == "v1beta2"
    old = World(MACHINES.replace("v1beta2", "v1beta1"))  # Cluster API before v1.11
    old.api.unserved.add("cluster.x-k8s.io/v1beta2")
    old.node("n", "m")
    op = Operation("r-1", RepairAction.REPLACE, old.clock.now())
    assert old.prov.refusal(old.lookup("n")) == ""
    old.step(op, "n")
    assert old.prov.served_version() == "v1beta1"
    assert old.api.read(f"{old.machines}/m") is None  # deleted through the version it serves


def test_no_cluster_api_refuses_the_node_and_fails_the_operation_without_reading_a_404_as_done() -> None:
    w = World()
    w.api.unserved.update({"cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"})
    w.api.put("/api/v1/nodes", {"metadata": {"name": "n", "labels": {NAMES.pool_label: "p"},
                                             "annotations": {MACHINE_ANNOTATION: "m", NAMESPACE_ANNOTATION: NS}}})
    assert "serves no Cluster API Machines" in w.prov.refusal(w.lookup("n"))
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    view = w.prov.progress(op, "n", "p", w.lookup)
    assert view.state == ProviderState.FAILED and "is Cluster API installed?" in view.message
    with pytest.raises(ProviderError, match="serves no Cluster API Machines"):
        w.prov.drive(op, "n", "p")


# --- reset is a replacement (Cluster API's MachineHealthCheck remediation deletes the Machine) -
def test_reset_deletes_the_machine_and_is_done_only_as_a_replacement() -> None:
    """No boot id is waited for: the old node must go and a new Ready node of the pool be claimed."""
    w = World()
    w.node("old", "m-old")
    w.clock.advance(5)
    op = Operation("r-1", RepairAction.RESET, w.clock.now(), boot_id_before="boot-0")
    assert w.step(op, "old").state == ProviderState.NOT_STARTED
    assert w.api.read(f"{MACHINES}/m-old") is None  # deleted, as a replace deletes it
    w.api.edit("/api/v1/nodes/old", lambda n: n["status"].update(nodeInfo={"bootID": "boot-1"}))  # a new boot
    view = w.step(op, "old")
    assert view.state == ProviderState.RUNNING and "node old still exists" in view.message  # not Succeeded
    w.api.remove("/api/v1/nodes/old")
    assert w.step(op, "old").state == ProviderState.RUNNING  # no new node yet
    w.clock.advance(5)
    w.node("new", "m-new")
    w.prov.drive(op, "old", "p")
    done = w.prov.progress(op, "old", "p", w.lookup)
    assert (done.state, done.new_node) == (ProviderState.SUCCEEDED, "new")


def test_the_kind_carries_a_reset_out_as_a_replacement() -> None:
    from autoclusters.providers.clusterapi import KIND
    from autoclusters.providers.declaration import ProviderKind

    assert KIND.carried_out_as(RepairAction.RESET) == RepairAction.REPLACE
    assert KIND.carried_out_as(RepairAction.REPLACE) == RepairAction.REPLACE
    with pytest.raises(ValueError, match="carries_out"):
        ProviderKind("odd", ("reset",), "", carries_out=(("reset", "replace"),))  # not an action of its own


# --- the Machines in a management cluster --------------------------------------------------
SECRET = f"/api/v1/namespaces/{NS}/secrets"
MANAGEMENT = "https://management.test:6443"


def kubeconfig(server: str = MANAGEMENT, user: JSON | None = None, cluster: JSON | None = None) -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "mgmt",
           "clusters": [{"name": "mgmt", "cluster": {"server": server, **(cluster or {})}}],
           "users": [{"name": "remediator", "user": user if user is not None else {"token": "t0ken"}}],
           "contexts": [{"name": "mgmt", "context": {"cluster": "mgmt", "user": "remediator"}}]}
    return yaml.safe_dump(doc)


class TwoClusters(World):
    """The workload cluster (nodes, the Secret) and a management cluster (Machines): two fake API
    servers; the kubeconfig's server says which one a client talks to."""

    def __init__(self, key: str = "value") -> None:
        super().__init__()
        self.management = FakeApi(clock=self.clock.now)
        self.servers = {MANAGEMENT: self.management}
        self.connected: list[str] = []
        self.mc = ManagementCluster(self.kube, self.clock, namespace=NS, key=key, connect=self.connect)
        self.prov = ClusterApiProvider(self.kube, self.clock, NAMES, management=self.mc)

    def connect(self, text: str) -> Kube:
        server = yaml.safe_load(text)["clusters"][0]["cluster"]["server"]
        self.connected.append(server)
        return self.servers[server].kube()

    def secret(self, data: dict[str, str] | None = None, text: str | None = None, key: str = "value") -> None:
        body = data if data is not None else {key: base64.b64encode((text or kubeconfig()).encode()).decode()}
        self.api.put(SECRET, {"metadata": {"name": CLUSTERAPI_SECRET, "namespace": NS}, "data": body})

    def node(self, name: str, machine: str, ready: bool = True) -> None:
        super().node(name, machine, ready)
        self.api.remove(f"{MACHINES}/{machine}")  # the Machine lives in the management cluster only
        self.management.put(MACHINES, {"metadata": {"name": machine, "namespace": NS}, "spec": {}})


def test_machines_are_asked_of_the_management_cluster_and_nodes_of_the_workload_cluster() -> None:
    w = TwoClusters()
    w.secret()
    w.node("old", "m-old")
    w.node("other", "m-other")
    w.clock.advance(5)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    assert w.prov.refusal(w.lookup("old")) == ""  # discovery answered by the management cluster
    assert w.step(op, "old").state == ProviderState.NOT_STARTED
    assert w.management.read(f"{MACHINES}/m-old") is None and w.management.read(f"{MACHINES}/m-other")
    w.api.remove("/api/v1/nodes/old")
    w.clock.advance(5)
    w.node("new", "m-new")
    w.step(op, "old")
    assert w.prov.progress(op, "old", "p", w.lookup).state == ProviderState.SUCCEEDED
    machine_requests = [r for r in w.api.requests if "cluster.x-k8s.io" in r.path]
    assert machine_requests == []  # the workload cluster was never asked about Machines
    # discovery (a GET of the group version, which the fake API logs as LIST), the Machine's get, patch, delete
    assert {r.verb for r in w.management.requests} == {"LIST", "GET", "PATCH", "DELETE"}
    assert not any(r.resource.startswith("nodes") for r in w.management.requests)  # nor the other about nodes
    assert w.connected == [MANAGEMENT]  # one client, however many looks


def test_the_secret_is_read_again_and_a_rotated_kubeconfig_is_used() -> None:
    w = TwoClusters()
    w.secret()
    w.node("n", "m")
    assert w.prov.served_version() == "v1beta2"
    moved = "https://management-2.test:6443"
    w.servers[moved] = w.management  # the same management cluster behind a new address
    w.secret(text=kubeconfig(moved))
    w.prov.served_version()
    assert w.connected == [MANAGEMENT]  # within SECRET_REREAD_SECONDS the client stays
    w.clock.advance(SECRET_REREAD_SECONDS)
    w.prov.served_version()
    assert w.connected == [MANAGEMENT, moved]
    w.clock.advance(SECRET_REREAD_SECONDS)
    w.prov.served_version()
    assert w.connected == [MANAGEMENT, moved]  # the same resourceVersion: no new client


@pytest.mark.parametrize(("secret", "why"), [
    (None, "Secret capi/autoclusters-clusterapi does not exist: it holds the management cluster's kubeconfig"),
    ({"kubeconfig": base64.b64encode(b"x").decode()}, "has no key value (the management cluster's kubeconfig; "
                                                      "its keys: kubeconfig)"),
    ({"value": "%%%"}, "key value is not base64 of UTF-8 text"),
    ({"value": base64.b64encode(b"[1, 2]").decode()}, "key value: the kubeconfig is not a kubeconfig"),
    ({"value": base64.b64encode(kubeconfig(user={"exec": {"command": "aws"}}).encode()).decode()},
     "authenticates with an exec plugin, which would run a program the Secret names"),
    ({"value": base64.b64encode(kubeconfig(cluster={"certificate-authority": "/ca.crt"}).encode()).decode()},
     "certificate-authority names a file"),
])
def test_an_unusable_secret_refuses_the_node_and_fails_an_operation_naming_the_secret(
        secret: dict[str, str] | None, why: str) -> None:
    w = TwoClusters()
    if secret is not None:
        w.secret(secret)
    w.node("n", "m")
    assert why in w.prov.refusal(w.lookup("n"))  # before a repair: never cordoned for nothing
    op = Operation("r-1", RepairAction.RESET, w.clock.now())
    view = w.prov.progress(op, "n", "p", w.lookup)
    assert view.state == ProviderState.FAILED and why in view.message
    with pytest.raises(ProviderError, match="Secret capi/autoclusters-clusterapi"):
        w.prov.drive(op, "n", "p")
    assert w.management.read(f"{MACHINES}/m")  # nothing deleted


def test_a_configured_key_holds_the_kubeconfig() -> None:
    w = TwoClusters(key="kubeconfig")  # a kubeconfig file as clusterctl users have it
    w.secret(key="kubeconfig")
    w.node("n", "m")
    assert w.prov.refusal(w.lookup("n")) == ""


def test_a_management_cluster_that_refuses_the_identity_fails_the_operation() -> None:
    w = TwoClusters()
    w.secret()
    w.node("n", "m")
    w.prov.served_version()

    def forbid(req: Any) -> None:
        if "/machines/" in req.path:
            raise ApiError(403, 'machines "m" is forbidden: User "remediator" cannot get resource "machines"',
                           reason="Forbidden")
    w.management.before.append(forbid)
    view = w.prov.progress(Operation("r-1", RepairAction.REPLACE, w.clock.now()), "n", "p", w.lookup)
    assert view.state == ProviderState.FAILED
    assert "https://management.test:6443" in view.message and "needs get, patch and delete" in view.message


def test_a_management_cluster_that_does_not_answer_is_asked_again_until_the_timeout() -> None:
    w = TwoClusters()
    w.secret()
    w.node("n", "m")
    w.prov.served_version()
    down = [True]

    def unavailable(req: Any) -> None:
        if down[0]:
            raise ApiError(503, "the server is currently unable to handle the request", reason="ServiceUnavailable")
    w.management.before.append(unavailable)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    view = w.prov.progress(op, "n", "p", w.lookup)
    assert view.state == ProviderState.RUNNING
    assert "cannot read Machine capi/m in the management cluster https://management.test:6443" in view.message
    with pytest.raises(ProviderError, match="unable to handle the request"):
        w.prov.drive(op, "n", "p")
    down[0] = False
    assert w.prov.progress(op, "n", "p", w.lookup).state == ProviderState.NOT_STARTED


def test_the_management_clusters_writes_are_fenced_and_counted_with_the_controllers() -> None:
    """A replica that lost its lease writes to no cluster, the management cluster included; the
    Machine requests count in the controller's request counter, as the provider's."""
    from autoclusters.kube.fence import Fenced, LeaseFence

    w = TwoClusters()
    w.secret()
    w.node("n", "m")
    fence = LeaseFence(w.clock)  # never granted: closed
    fenced = w.kube.fenced(fence).for_component("provider/clusterapi")
    mc = ManagementCluster(fenced, w.clock, namespace=NS, connect=w.connect)
    prov = ClusterApiProvider(fenced, w.clock, NAMES, management=mc)
    op = Operation("r-1", RepairAction.REPLACE, w.clock.now())
    with pytest.raises(Fenced):
        prov.drive(op, "n", "p")
    assert not [r for r in w.management.requests if r.verb in ("PATCH", "DELETE")]
    assert w.management.read(f"{MACHINES}/m")
    assert mc.kube().requests is fenced.requests and mc.kube().component == "provider/clusterapi"
