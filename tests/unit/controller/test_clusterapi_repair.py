"""A whole repair through the clusterapi provider with its Machines in a management cluster of their
own (two fake API servers: the workload cluster the controller runs in, the management cluster of
the kubeconfig Secret): a GPU fault whose catalog action is a reset is carried out as Cluster API's
remediation does it, a replacement; it succeeds only once the old node is gone and a new Ready node
of the pool is claimed, and a Secret that breaks mid-repair fails it with an event naming it."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from autoclusters import names as n
from autoclusters.api import RepairAction
from autoclusters.kube import Kube
from autoclusters.providers import clusterapi
from autoclusters.providers.clusterapi import (
    CLUSTERAPI_SECRET,
    MACHINE_ANNOTATION,
    NAMESPACE_ANNOTATION,
    SECRET_REREAD_SECONDS,
)
from tests.unit.controller.harness import NAMESPACE, Harness
from tests.unit.fakeapi import FakeApi

JSON = dict[str, Any]
MANAGEMENT = "https://management.test:6443"
CAPI_NS = "gpu-cluster"
MACHINES = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{CAPI_NS}/machines"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"


def kubeconfig(server: str = MANAGEMENT) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "mgmt",
        "clusters": [{"name": "mgmt", "cluster": {"server": server}}],
        "users": [{"name": "remediator", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "mgmt", "context": {"cluster": "mgmt", "user": "remediator"}}]})


class World:
    def __init__(self, h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
        self.h = h
        self.management = FakeApi(clock=h.clock.now)
        servers = {MANAGEMENT: self.management}

        def connect(text: str) -> Kube:
            return servers[yaml.safe_load(text)["clusters"][0]["cluster"]["server"]].kube()
        monkeypatch.setattr(clusterapi, "connect_kubeconfig", connect)

    def secret(self, text: str) -> None:
        self.h.api.put(SECRETS, {"metadata": {"name": CLUSTERAPI_SECRET, "namespace": NAMESPACE},
                                 "data": {"value": base64.b64encode(text.encode()).decode()}})

    def machine_node(self, node: str, machine: str) -> None:
        self.management.put(MACHINES, {"metadata": {"name": machine, "namespace": CAPI_NS}, "spec": {}})
        self.h.node(node)
        self.h.api.edit(f"/api/v1/nodes/{node}", lambda o: o["metadata"].setdefault("annotations", {}).update(
            {MACHINE_ANNOTATION: machine, NAMESPACE_ANNOTATION: CAPI_NS}))

    def record(self) -> JSON:
        (rec,) = self.h.records("gpu-1")
        return rec


@pytest.fixture
def w(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    h = Harness()
    world = World(h, monkeypatch)
    world.secret(kubeconfig())
    h.pool(provider={"type": "clusterapi", "clusterapi": {"managementCluster": "secret"}})
    world.machine_node("gpu-1", "m-1")
    world.machine_node("gpu-0", "m-0")
    h.start()
    yield world
    h.stop()


def test_a_reset_fault_is_carried_out_as_a_replacement_in_the_management_cluster(w: World) -> None:
    h = w.h
    h.fault("gpu-1")  # Xid 79: the catalog's action is a reset
    h.run(until=lambda: w.management.read(f"{MACHINES}/m-1") is None)
    status = w.record()["status"]
    assert status["action"] == RepairAction.REPLACE  # recorded, drained and proved as a replacement
    assert "carries out a reset as a replacement" in " ".join(e["message"] for e in h.events(n.EVENT_SCHEDULED))
    assert w.management.read(f"{MACHINES}/m-0")  # the other Machine stays
    assert not [r for r in h.api.requests if "cluster.x-k8s.io" in r.path]  # Machines: never the workload's
    # The Machine is gone, its node is not (no boot id is waited for; a new one changes nothing).
    h.api.edit("/api/v1/nodes/gpu-1", lambda o: o["status"]["nodeInfo"].update(bootID="boot-gpu-1-1"))
    h.run(seconds=60)
    assert w.record()["status"]["phase"] == "Acting"  # the provider: "Machine ... is gone but node gpu-1 still exists"
    assert not h.events(n.EVENT_SUCCEEDED)
    # Cluster API deletes the node; the MachineSet's new Machine brings a node of the pool.
    h.api.remove("/api/v1/nodes/gpu-1")
    h.clock.advance(2)
    w.machine_node("gpu-2", "m-2")
    h.run(until=lambda: h.phase("gpu-1") == "Succeeded", seconds=120)
    status = w.record()["status"]
    assert status["phase"] == "Succeeded" and status["replacementNode"] == "gpu-2"
    ann = (h.node_obj("gpu-2") or {})["metadata"]["annotations"]
    assert ann[h.names.operation_annotation] == status["operation"]["id"]  # claimed one for one


@pytest.mark.parametrize(("broken", "why"), [
    ("not: [a kubeconfig", "key value: the kubeconfig is not YAML"),
    (None, "does not exist: it holds the management cluster's kubeconfig"),
])
def test_a_secret_that_breaks_mid_repair_fails_it_with_an_event_naming_the_secret(
        w: World, broken: str | None, why: str) -> None:
    h = w.h
    h.fault("gpu-1")
    h.run(until=lambda: w.management.read(f"{MACHINES}/m-1") is None)
    if broken is None:
        h.api.remove(f"{SECRETS}/{CLUSTERAPI_SECRET}")  # deleted
    else:
        w.secret(broken)  # rotated to something unusable
    h.clock.advance(SECRET_REREAD_SECONDS)
    h.run(until=lambda: h.phase("gpu-1") == "Failed", seconds=120)
    (failed, *_) = h.events(n.EVENT_FAILED)
    assert f"Secret {NAMESPACE}/{CLUSTERAPI_SECRET} {why}" in failed["message"]
    assert h.phase("gpu-1") == "Failed"  # a failed replacement holds the node for a human: no loop


def test_a_missing_secret_refuses_the_pools_nodes_before_anything_is_cordoned(w: World) -> None:
    h = w.h
    h.api.remove(f"{SECRETS}/{CLUSTERAPI_SECRET}")
    h.clock.advance(SECRET_REREAD_SECONDS)
    h.fault("gpu-1")
    h.run(seconds=30)
    refused = " ".join(e["message"] for e in h.events("ProviderRefusedNode"))
    assert f"Secret {NAMESPACE}/{CLUSTERAPI_SECRET} does not exist" in refused
    assert not (h.node_obj("gpu-1") or {}).get("spec", {}).get("unschedulable")
    assert w.management.read(f"{MACHINES}/m-1")  # nothing deleted
