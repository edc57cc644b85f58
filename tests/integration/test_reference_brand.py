"""The reference system's contract end to end: domain ``crusoe.ai``, prefix ``Crusoe`` and
event source ``nodepool-service``, on the real API server with the real controller.

Under ``propose`` the user approves with ``kubectl label`` exactly as the reference's docs
say, and ``kubectl describe node`` must then list MaintenanceRequired, AwaitingApproval,
Approved, Started and Succeeded, once each, in that order, from ``nodepool-service``, with
messages that say what happens and what to do. Under ``auto`` the repair is scheduled with
its start time. The tests act as the detector (they write the fault condition, and clear it
once the node has rebooted).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoclusters import names as n
from autoclusters.deploy.crds import crds
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.pools.pool_config import gpu_node_pool_object, pool_from_config
from tests.integration.helpers import kubectl, wait_for
from tests.integration.ops_support import (
    clear_fault,
    create_nodes,
    create_pool,
    delete_pool_nodes,
    labels,
    report_fault,
    running_controller,
)

REFERENCE = n.Names("crusoe.ai", "Crusoe")
SOURCE = n.REFERENCE_EVENT_SOURCE
# The steps of the reference's approved VM reset, as kubectl describe node lists them.
PROPOSE_FLOW = [(n.EVENT_REQUIRED, "Warning"), (n.EVENT_AWAITING_APPROVAL, "Normal"), (n.EVENT_APPROVED, "Normal"),
                (n.EVENT_STARTED, "Normal"), (n.EVENT_SUCCEEDED, "Normal")]
AUTO_FLOW = [(n.EVENT_REQUIRED, "Warning"), (n.EVENT_SCHEDULED, "Normal"), (n.EVENT_STARTED, "Normal"),
             (n.EVENT_SUCCEEDED, "Normal")]
# Events autoclusters adds around the reference's steps (the pre-drain warning to the workload).
EXTRA = {n.EVENT_DRAIN_WARNING, n.EVENT_DRAIN_WAIT_ENDED}


@pytest.fixture(scope="module")
def reference(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The reference brand's CRDs and a controller running under it (its own lease)."""
    suffix = secrets.token_hex(3)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ref-{suffix}"}}  # for the lease
    objs = [namespace, *crds(REFERENCE)]
    cluster.apply(objs)
    log = tmp_path_factory.mktemp("reference-brand") / "controller.log"
    try:
        with running_controller(cluster, REFERENCE, f"ref-{suffix}", log,
                                extra=("--event-source", SOURCE, "--namespace", f"ref-{suffix}")):
            yield log
    finally:
        for obj in objs:
            cluster.kube.delete_object(obj)
        cluster.kube.forget_discovery()


def events(cluster: ClusterHandle, node: str) -> list[dict[str, Any]]:
    """The node's events read with kubectl, from every source, in ``kubectl describe`` order."""
    out = kubectl(cluster.kubeconfig, "get", "events", "-A", "-o", "json",
                  "--field-selector", f"involvedObject.kind=Node,involvedObject.name={node}")
    items = json.loads(out)["items"]

    def when(e: dict[str, Any]) -> str:
        return (e.get("series") or {}).get("lastObservedTime") or e.get("lastTimestamp") or e.get("eventTime") or ""
    return sorted((e for e in items if e.get("reportingComponent") == SOURCE or
                   (e.get("source") or {}).get("component") == SOURCE), key=when)


def described_reasons(cluster: ClusterHandle, node: str) -> list[tuple[str, str, str]]:
    """(type, reason, from) of each row of the Events section of ``kubectl describe node``."""
    text = kubectl(cluster.kubeconfig, "describe", "node", node)
    section = text.split("\nEvents:", 1)[1]
    rows = []
    for line in section.splitlines()[3:]:  # header and its underline
        m = re.match(r"^\s+(Normal|Warning)\s+(\S+)\s+\S+\s+(\S+?),?\s", line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def repair(cluster: ClusterHandle, pool: str, mode: str, approve: bool, log: Path) -> tuple[str, list[dict[str, Any]]]:
    create_pool(cluster.kube, REFERENCE, pool, mode)
    (node,) = create_nodes(cluster, REFERENCE, pool, 1)
    assert labels(cluster.kube, node)["crusoe.ai/nodepool.name"] == pool
    boot = cluster.kube.get_node(node)["status"]["nodeInfo"]["bootID"]
    report_fault(cluster.kube, REFERENCE, node)  # what the detector writes: CrusoeGPUFault=True
    if approve:
        wait_for(f"MaintenanceAwaitingApproval on {node} (controller log: {log})",
                 lambda: any(e["reason"] == n.EVENT_AWAITING_APPROVAL for e in events(cluster, node)), timeout=60)
        assert labels(cluster.kube, node)["crusoe.ai/maintenance-required"] == "true"
        # the reference's documented approval, word for word
        kubectl(cluster.kubeconfig, "label", "node", node, "crusoe.ai/maintenance-approved=true")
    wait_for(f"the VM reset of {node} (controller log: {log})",
             lambda: cluster.kube.get_node(node)["status"]["nodeInfo"]["bootID"] != boot, timeout=90)
    clear_fault(cluster.kube, REFERENCE, node)  # the rebooted node reports no fault
    wait_for(f"MaintenanceSucceeded on {node} (controller log: {log})",
             lambda: any(e["reason"] == n.EVENT_SUCCEEDED for e in events(cluster, node)), timeout=60)
    return node, events(cluster, node)


def test_propose_flow_under_the_reference_names(cluster: ClusterHandle, reference: Path) -> None:
    pool = f"ref-pro-{secrets.token_hex(2)}"
    try:
        node, evs = repair(cluster, pool, "propose", approve=True, log=reference)
        got = [(e["reason"], e["type"]) for e in evs if e["reason"] not in EXTRA]
        assert got == PROPOSE_FLOW, got
        for e in evs:
            assert e["source"]["component"] == SOURCE and e["reportingComponent"] == SOURCE
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e["eventTime"]), e["eventTime"]
        times = [e["eventTime"] for e in evs]
        assert times == sorted(times) and len(set(times)) == len(times)
        msg = {e["reason"]: e["message"] for e in evs}
        assert msg[n.EVENT_REQUIRED] == (f"Repair needed: GPU 3 reported Xid 79 (GPU has fallen off the bus). "
                                         f"Pool {pool} has consent mode propose: the repair waits for your approval.")
        assert msg[n.EVENT_AWAITING_APPROVAL] == (
            "A VM reset is proposed. To approve it, add the label crusoe.ai/maintenance-approved=true to this node: "
            f"kubectl label node {node} crusoe.ai/maintenance-approved=true")
        assert msg[n.EVENT_APPROVED] == \
            "VM reset approved: the label crusoe.ai/maintenance-approved=true is on the node."
        assert msg[n.EVENT_STARTED].startswith("VM reset started: the node is cordoned")
        assert msg[n.EVENT_SUCCEEDED] == "VM reset succeeded: the node rebooted, is Ready and reports no gpu fault."
        # what a user reads: the same order and source in kubectl describe node
        rows = described_reasons(cluster, node)
        ours = [(reason, typ) for typ, reason, src in rows if src == SOURCE and reason not in EXTRA]
        assert ours == PROPOSE_FLOW, rows
        assert all(src == SOURCE for _, reason, src in rows if reason.startswith("Maintenance")), rows
        wait_for("both labels removed", lambda: not {"crusoe.ai/maintenance-required", "crusoe.ai/maintenance-approved"}
                 & set(labels(cluster.kube, node)), timeout=30)
    finally:
        delete_pool_nodes(cluster, REFERENCE, pool)
        cluster.kube.delete_object(gpu_node_pool_object(pool_from_config({"name": pool}), REFERENCE))


def test_auto_flow_is_scheduled_with_its_start_time(cluster: ClusterHandle, reference: Path) -> None:
    pool = f"ref-aut-{secrets.token_hex(2)}"
    try:
        _node, evs = repair(cluster, pool, "auto", approve=False, log=reference)
        got = [(e["reason"], e["type"]) for e in evs if e["reason"] not in EXTRA]
        assert got == AUTO_FLOW, got
        scheduled = next(e for e in evs if e["reason"] == n.EVENT_SCHEDULED)
        start = re.fullmatch(r"VM reset scheduled to start at (\S+)Z\.", scheduled["message"])
        assert start, scheduled["message"]
        # Decided and announced at once. The start time (whole seconds) is when the controller
        # decided; the event is stamped when it was emitted, milliseconds (under load up to about
        # a second) later, so it falls in the start's second or the next one.
        decided = datetime.fromisoformat(start.group(1) + "+00:00")
        announced = datetime.fromisoformat(scheduled["eventTime"].replace("Z", "+00:00"))
        assert timedelta(0) <= announced - decided < timedelta(seconds=2), (decided, announced)
        assert "without waiting for approval" in evs[0]["message"]
    finally:
        delete_pool_nodes(cluster, REFERENCE, pool)
        cluster.kube.delete_object(gpu_node_pool_object(pool_from_config({"name": pool}), REFERENCE))
