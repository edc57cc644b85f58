"""The Cluster API provider's object handling (the Machine a node names, the remediation patch)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.names import Names
from autoclusters.pools.pool_config import pool_from_config
from autoclusters.providers.base import ProviderError
from autoclusters.providers.clusterapi import (
    MACHINE_ANNOTATION,
    NAMESPACE_ANNOTATION,
    ClusterApiProvider,
    machine_ref,
    remediation_patch,
)
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from tests.unit.fakeapi import FakeApi

JSON = dict[str, Any]

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_capi_machine_ref_and_patch() -> None:
    node = {"metadata": {"annotations": {"cluster.x-k8s.io/machine": "m-1",
                                         "cluster.x-k8s.io/cluster-namespace": "capi"}}}
    ref = machine_ref(node)
    assert ref is not None and ref.path() == "/apis/cluster.x-k8s.io/v1beta2/namespaces/capi/machines/m-1"
    assert machine_ref({"metadata": {}}) is None
    op = Operation("r-1", RepairAction.RESET, T)
    patch = remediation_patch(op, "2026-03-01T12:00:00Z", Names())
    assert set(patch["metadata"]["annotations"]) == {"cluster.x-k8s.io/remediate-machine",
                                                     "remediation.autoclusters.io/operation"}
    branded = remediation_patch(op, "2026-03-01T12:00:00Z", Names(domain="crusoe.ai", prefix="Crusoe"))
    assert "remediation.crusoe.ai/operation" in branded["metadata"]["annotations"]  # was the default domain's


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
        "type": "clusterapi", "clusterapi": {"version": "v1beta2"}}
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
