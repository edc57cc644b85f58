"""``pulumi destroy`` of a stack with nodes in mid-repair leaves no mark of ours on any node.

The stack takes existing nodes (made by the test, so they outlive the stack and can be looked
at after the destroy) into two pools; the controller and the webhook run on this host under the
stack's service accounts, as in the local mode. Four repairs are stopped in four phases: a
reset under way (Acting: the simulated reset takes ten minutes), a drain that waits for a pod's
acknowledgement (Draining), one held by ``maxConcurrentRepairs`` (Scheduled) and a proposal
(AwaitingApproval) on a node an operator had cordoned. The first destroy removes every mark,
lifts the cordons autoclusters put, keeps the operator's, and fails naming the one cordon it
cannot lift yet (the node under reset) and the command that lifts it; once that is run, the
second destroy finishes and nothing of the stack is left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.automation import CommandError

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import NotFound
from autoclusters.ops.uninstall import marks_of, pod_annotations_ours
from tests.integration.helpers import wait_for
from tests.integration.test_pulumi_up import StackRun, pulumi_tools  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


class MidRepairStack(StackRun):
    """Two pools over existing nodes: ``a<unique>`` (auto, two repairs at a time, a slow reset) and
    ``b<unique>`` (propose)."""

    def __init__(self, cluster: ClusterHandle, tmp: Path, unique: str) -> None:
        self.source_a, self.source_b = f"sa{unique}", f"sb{unique}"
        super().__init__(cluster, tmp, unique)

    def config(self, mode: str) -> dict[str, Any]:
        cfg = super().config(mode)
        label = self.cluster.names.pool_label
        cfg["autoclusters:pools"] = [
            {"name": self.pool, "consentMode": "auto", "maxConcurrentRepairs": 2,
             "circuitBreaker": {"openAbovePercent": 100, "closeBelowPercent": 90},
             "drain": {"resetDeadlineSeconds": 600, "replaceDeadlineSeconds": 600},
             "provider": {"type": "simulated", "simulated": {"resetSeconds": 600, "replaceSeconds": 600}},
             "nodes": {"selector": {label: self.source_a}}},
            {"name": f"gpub{self.pool.removeprefix('gpu')}", "consentMode": "propose",
             "provider": {"type": "simulated"}, "nodes": {"selector": {label: self.source_b}}}]
        return cfg

    def phase(self, node: str) -> str:
        recs = self.records(node)
        return str((recs[-1].get("status") or {}).get("phase", "")) if recs else ""


@pytest.fixture()
def stack(cluster: ClusterHandle, pulumi_tools: Any, tmp_path: Path, unique: str  # noqa: F811
          ) -> Iterator[tuple[MidRepairStack, list[str]]]:
    if not cluster.local:
        pytest.skip("the simulated provider's resets need the local (kwok) cluster")
    run = MidRepairStack(cluster, tmp_path, unique)
    made = cluster.create_gpu_nodes(run.source_a, 3, prefix=run.source_a)
    made += cluster.create_gpu_nodes(run.source_b, 1, prefix=run.source_b)
    try:
        yield run, made
    finally:
        run.stop_all()
        with contextlib.suppress(Exception):
            if run.leftovers() or run.kube.list_items(run.path("remediations")):
                for node in made:  # whatever a failed test left cordoned
                    run.kube.patch_node(node, {"spec": {"unschedulable": None}})
                run.stack.destroy(on_output=lambda _: None)
        for node in made:
            with contextlib.suppress(NotFound):
                cluster.kube.delete(f"/api/v1/nodes/{node}")
        with contextlib.suppress(NotFound):
            cluster.kube.delete(f"/api/v1/namespaces/wl-{unique}")


def _marks(run: StackRun, node: str) -> list[str]:
    return marks_of(run.names, run.kube.get_node(node))


def test_destroy_in_mid_repair_leaves_no_marks_and_says_what_it_could_not_lift(
        stack: tuple[MidRepairStack, list[str]], unique: str) -> None:
    run, made = stack
    a0, a1, a2, b0 = made
    kube = run.kube
    out: list[str] = []
    result = run.stack.up(on_output=out.append)
    assert result.summary.result == "succeeded", "".join(out[-40:])
    kube.patch_node(b0, {"spec": {"unschedulable": True}})  # an operator's cordon, before any repair
    ns = f"wl-{unique}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ckpt", "labels": {run.names.drain_wait_label: "true"}},
        "spec": {"nodeName": a1, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "busybox"}]}})
    run.start_webhook()
    run.start_controller()

    run.raise_fault(a0)
    wait_for(f"{a0} to be under reset", lambda: run.phase(a0) == "Acting", timeout=60)
    run.raise_fault(a1)
    wait_for(f"{a1} to wait for its pod", lambda: run.phase(a1) == "Draining", timeout=60)
    run.raise_fault(a2)
    wait_for(f"{a2} to be held", lambda: run.phase(a2) == "Scheduled", timeout=60)
    run.raise_fault(b0)
    wait_for(f"{b0} to await approval", lambda: run.phase(b0) == "AwaitingApproval", timeout=60)
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/ckpt")
    assert pod_annotations_ours(run.names, pod["metadata"].get("annotations") or {})  # warned
    assert kube.get_node(a0)["spec"].get("unschedulable") and kube.get_node(a1)["spec"].get("unschedulable")
    assert all(_marks(run, n) for n in made)

    run.stop_all()
    with pytest.raises(CommandError) as failed:
        run.stack.destroy(on_output=out.append)
    message = str(failed.value)
    assert f"LEFT node {a0}: the cordon: its reset" in message and f"kubectl uncordon {a0}" in message, message
    for other in (a1, a2, b0):
        assert f"LEFT node {other}" not in message
    assert {n: _marks(run, n) for n in made} == {n: [] for n in made}
    assert kube.get_node(a0)["spec"].get("unschedulable") is True  # the one it could not lift
    assert not kube.get_node(a1)["spec"].get("unschedulable")  # autoclusters' cordon of the drain: lifted
    assert not kube.get_node(a2)["spec"].get("unschedulable")
    assert kube.get_node(b0)["spec"].get("unschedulable") is True  # the operator's: kept
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/ckpt")
    assert pod_annotations_ours(run.names, pod["metadata"].get("annotations") or {}) == []

    kube.patch_node(a0, {"spec": {"unschedulable": None}})  # what the message says to run
    result = run.stack.destroy(on_output=out.append)
    assert result.summary.result == "succeeded", "".join(out[-40:])
    wait_for("the stack's objects to be gone", lambda: not run.leftovers(), timeout=60)
    assert {n: _marks(run, n) for n in made} == {n: [] for n in made}
    assert kube.get_node(b0)["spec"].get("unschedulable") is True
    assert not any(kube.get_node(n)["spec"].get("unschedulable") for n in (a0, a1, a2))
