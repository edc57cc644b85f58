"""The Karpenter provider against the real Karpenter (its kwok cloud provider) on the cluster.

Karpenter launches the pool's nodes for a training-like workload; the provider's pieces run
as the controller runs them: marking (with Karpenter's do-not-disrupt), the drain through
the Eviction API under the workload's PodDisruptionBudget, then ``drive``/``progress``
until the replacement is matched; and the whole repair by the controller, from the fault
condition to the record's Succeeded.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters import names as event_names
from autoclusters.api import RepairAction
from autoclusters.clock import SystemClock
from autoclusters.controller import drain as drainrules
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.notifier import LogNotifier
from autoclusters.demo.story import training_workload
from autoclusters.deploy.workloads import CONTROLLER
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.local_karpenter import nodepool_manifest
from autoclusters.kube import NotFound
from autoclusters.kube.events import EventRecorder
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers.karpenter import (
    DO_NOT_DISRUPT,
    DO_NOT_REPAIR,
    NODEPOOL_LABEL,
    KarpenterProvider,
    claim_of,
    nodeclaims_path,
)
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from tests.integration.controller_support import ROW_REMAP_FAILURE_MESSAGE, Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


class KarpenterPool:
    """A Karpenter NodePool whose nodes carry autoclusters' pool label, and a workload on it."""

    def __init__(self, handle: ClusterHandle, unique: str, pool: str = "", names: Names | None = None) -> None:
        self.h = handle
        self.kube = handle.kube
        self.names = names or handle.names  # the labels of the controller that repairs its nodes
        self.pool = pool or f"kp-{unique}"
        self.nodepool = f"gpu-{unique}"
        self.namespace = f"train-{unique}"
        # room for the workers, plus the replacement launched while the old node still exists
        handle.apply(nodepool_manifest(self.nodepool, self.pool, self.names, limit_gpus=8 * 4))

    def run_workers(self, replicas: int) -> None:
        self.h.apply(training_workload(self.names.pool_label, self.pool, replicas, namespace=self.namespace))

    def scale(self, replicas: int) -> None:
        self.kube.patch(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/trainer",
                        {"spec": {"replicas": replicas}})

    def workers(self) -> list[dict[str, Any]]:
        pods = self.kube.list_items(f"/api/v1/namespaces/{self.namespace}/pods", label_selector="app=trainer")
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def running(self) -> dict[str, str]:
        """worker pod -> its node, for the Running workers."""
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.workers()
                if (p.get("status") or {}).get("phase") == "Running"}

    def running_exactly(self, count: int) -> dict[str, str] | None:
        """``running()`` once exactly ``count`` workers run, else None (a wait_for check)."""
        running = self.running()
        return running if len(running) == count else None

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.kube.list_nodes(f"{NODEPOOL_LABEL}={self.nodepool}")
                if not n["metadata"].get("deletionTimestamp")]

    def claims(self) -> list[dict[str, Any]]:
        return self.kube.list_items(nodeclaims_path(), label_selector=f"{NODEPOOL_LABEL}={self.nodepool}")

    def close(self) -> None:
        with contextlib.suppress(NotFound):
            self.kube.delete(f"/api/v1/namespaces/{self.namespace}")
        with contextlib.suppress(NotFound):
            self.kube.delete(f"/apis/karpenter.sh/v1/nodepools/{self.nodepool}")


@pytest.fixture()
def kpool(karpenter: ClusterHandle, unique: str) -> Iterator[KarpenterPool]:
    kp = KarpenterPool(karpenter, unique)
    try:
        yield kp
    finally:
        kp.close()


def actuator(handle: ClusterHandle) -> Actuator:
    return Actuator(handle.kube, handle.names, EventRecorder(handle.kube, SystemClock(), CONTROLLER),
                    LogNotifier())


def drain_fully(act: Actuator, kube: Any, node: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while drainrules.drainable(kube.pods_on_node(node)):
        assert time.monotonic() < deadline, f"{node} still has pods after {timeout}s"
        act.drain(node, force=False)
        time.sleep(0.5)


def replace_until_done(prov: KarpenterProvider, op: Operation, node: str, pool: str, kube: Any,
                       timeout: float) -> ProviderView:
    """What the controller does while Acting: drive, then read progress, until it ends."""
    def lookup(name: str) -> dict[str, Any] | None:
        try:
            return kube.get_node(name)
        except NotFound:
            return None

    deadline = time.monotonic() + timeout
    while True:
        prov.drive(op, node, pool)
        view = prov.progress(op, node, pool, lookup)
        if view.state in (ProviderState.SUCCEEDED, ProviderState.FAILED) or time.monotonic() > deadline:
            return view
        time.sleep(0.5)


def test_replacement_through_karpenter_brings_a_new_node_and_the_evicted_worker_runs_on_it(
        kpool: KarpenterPool, unique: str) -> None:
    names = kpool.names
    kpool.run_workers(2)
    placed = wait_for("two workers Running on Karpenter's nodes", lambda: kpool.running_exactly(2), timeout=180)
    before = {n["metadata"]["name"] for n in kpool.nodes()}
    assert set(placed.values()) <= before and len(before) == 2  # Karpenter launched one node per worker
    for n in kpool.nodes():
        assert n["metadata"]["labels"][names.pool_label] == kpool.pool  # from the NodePool's template
    victim_pod, old = sorted(placed.items())[0]
    survivor_pod = next(p for p in placed if p != victim_pod)
    # By providerID: Karpenter removes the node's unregistered taint (so the worker can run) before it
    # writes the NodeClaim's status.nodeName, so the name may not be there yet; the providerID is.
    old_obj = kpool.kube.get_node(old)
    found = claim_of(old, old_obj["spec"].get("providerID", ""), kpool.claims())
    assert found, f"no NodeClaim names {old} or its providerID"
    old_claim = found["metadata"]["name"]
    owners = [r["name"] for r in old_obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "NodeClaim"]
    assert owners == [old_claim]  # Karpenter names it on the node: the provider reads that one, lists none

    act = actuator(kpool.h)
    marked = act.ensure_marked(kpool.kube.get_node(old), cordon=True)
    ann = marked["metadata"]["annotations"]
    assert ann[DO_NOT_DISRUPT] == ann[DO_NOT_REPAIR] == "true" and names.marked_at_annotation in ann
    drain_fully(act, kpool.kube, old)

    op = Operation(f"kp-{unique}-1", RepairAction.REPLACE, datetime.now(UTC))
    prov = KarpenterProvider(kpool.kube, SystemClock(), names, timeout_seconds=240)
    view = replace_until_done(prov, op, old, kpool.pool, kpool.kube, timeout=240)
    assert view.state == ProviderState.SUCCEEDED, view.message
    new = view.new_node
    assert new and new not in before

    wait_for(f"{old} and its NodeClaim gone", lambda: old not in {n["metadata"]["name"] for n in kpool.nodes()}
             and old_claim not in {c["metadata"]["name"] for c in kpool.claims()}, timeout=120)
    new_obj = kpool.kube.get_node(new)
    assert node_ready(new_obj) and new_obj["metadata"]["labels"][names.pool_label] == kpool.pool
    assert new_obj["metadata"]["annotations"][prov.operation_annotation] == op.id
    assert new_obj["metadata"]["annotations"][prov.replaces_annotation] == old
    assert len(kpool.nodes()) == 2  # the pool is back to its size
    running = wait_for("both workers Running again", lambda: kpool.running_exactly(2), timeout=120)
    assert running[survivor_pod] != old
    assert new in running.values()  # the evicted worker's replacement runs on the new node
    assert old not in running.values()


def test_replacing_an_idle_node_fails_at_the_timeout_because_nothing_is_pending(
        kpool: KarpenterPool, unique: str) -> None:
    kpool.run_workers(1)
    placed = wait_for("a worker Running", lambda: kpool.running(), timeout=180)
    (old,) = set(placed.values())
    kpool.scale(0)  # the node stays (consolidation is off) but runs nothing any more
    wait_for("no workers", lambda: not kpool.workers(), timeout=60)

    op = Operation(f"kp-{unique}-1", RepairAction.REPLACE, datetime.now(UTC))
    prov = KarpenterProvider(kpool.kube, SystemClock(), kpool.names, timeout_seconds=25)
    view = replace_until_done(prov, op, old, kpool.pool, kpool.kube, timeout=60)
    assert view.state == ProviderState.FAILED
    assert "Pending pods" in view.message and kpool.nodepool in view.message
    assert kpool.nodes() == []  # Karpenter removed the node and launched none: nothing asked for one


def test_the_controller_replaces_a_faulty_node_through_karpenter(ctl: Env, karpenter: ClusterHandle,
                                                                 unique: str) -> None:
    """A DCGM row-remapping failure (a replace fault) on a Karpenter node: the controller marks it (do-not-disrupt),
    drains it, deletes its NodeClaim; Karpenter launches a node for the evicted worker; the
    record ends Succeeded naming it."""
    pool, _ = ctl.pool("auto", nodes=0, provider={
        "type": "simulated", "replace": {"type": "karpenter", "karpenter": {"timeoutSeconds": 240}}})
    kp = KarpenterPool(karpenter, unique, pool=pool, names=ctl.names)
    try:
        kp.run_workers(2)
        placed = wait_for("two workers Running", lambda: kp.running_exactly(2), timeout=180)
        before = {n["metadata"]["name"] for n in kp.nodes()}
        victim_pod, old = sorted(placed.items())[0]
        ctl.raise_fault(old, ROW_REMAP_FAILURE_MESSAGE)
        wait_for("do-not-disrupt on the marked node",
                 lambda: (o := ctl.find_node(old)) is None
                 or (o["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true", timeout=60)
        done = ctl.record_in(old, "Succeeded", "Failed", timeout=300)
        status = done["status"]
        assert status["phase"] == "Succeeded", status.get("message")
        new = status["replacementNode"]
        assert status["action"] == "replace" and new and new not in before
        assert ctl.labels(new)[ctl.names.pool_label] == pool
        assert ctl.find_node(old) is None  # done only once Karpenter removed the old node
        # the controller's reconcile that finds the old node gone: none can open a record after it
        assert ctl.saw_gone(old) == "no open repair"
        assert len(ctl.records(old)) == 1 and event_names.EVENT_FAILED not in ctl.reasons(old)
        running = wait_for("both workers Running", lambda: kp.running_exactly(2), timeout=120)
        assert new in running.values() and old not in running.values()
        assert victim_pod not in running  # the evicted worker was replaced by its Deployment
        assert sorted(ctl.pool_nodes(pool)) == sorted((before - {old}) | {new})  # back to its size
    finally:
        kp.close()
