"""The example approval controller against a real API server: it approves only nodes that need a
repair, runs the preparation step first, treats a cleared fault as done, and keeps working when
a replacement brings a new node name into the pool."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.processes import free_port
from autoclusters.kube import Kube
from tests.integration.helpers import wait_for
from tests.integration.ops_support import (
    clear_fault,
    controller_identity,
    labels,
    mark,
    node_events,
    report_fault,
    unmark,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "approval-controller"


@pytest.fixture()
def as_controller(cluster: ClusterHandle, unique: str) -> Iterator[Kube]:
    with controller_identity(cluster, unique) as kube:
        yield kube


@pytest.fixture()
def approver_kubeconfig(cluster: ClusterHandle) -> Iterator[str]:
    """The example's own RBAC (rbac.yaml), applied as a user would."""
    objs = list(yaml.safe_load_all((EXAMPLE / "rbac.yaml").read_text()))
    cluster.apply([o for o in objs if o["kind"] != "ServiceAccount"])
    yield cluster.service_account_kubeconfig("autoclusters-system", "autoclusters-approval-controller")
    for obj in objs[1:]:
        cluster.kube.delete_object(obj)


def start(kubeconfig: str, pool: str, prepare: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE / "approval_controller.py"), "--kubeconfig", kubeconfig, "--pool", pool,
         "--prepare", prepare, "--retry-after", "1", "--watch-timeout", "20", *extra],
        stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def reasons(kube: Kube, node: str) -> set[str]:
    return {e.get("reason", "") for e in node_events(kube, node)}


def test_prepares_then_approves_only_nodes_that_need_it(cluster: ClusterHandle, as_controller: Kube,
                                                        approver_kubeconfig: str, unique: str,
                                                        tmp_path: Path) -> None:
    names, kube = cluster.names, cluster.kube
    pool, other = f"appr-{unique}", f"apprx-{unique}"
    due, healthy, clears = cluster.create_gpu_nodes(pool, 3, prefix=pool)
    (elsewhere,) = cluster.create_gpu_nodes(other, 1, prefix=other)
    for node in (due, clears, elsewhere):
        report_fault(kube, names, node)
        mark(as_controller, names, node)

    prepared, gate = tmp_path / "prepared.txt", tmp_path / "gate"
    # The step records what it was told; for `clears` it blocks until the test opens the gate,
    # so the fault can clear while the preparation runs.
    prepare = (f'echo "$AUTOCLUSTERS_NODE $AUTOCLUSTERS_POOL $AUTOCLUSTERS_FAULT_REASON" >> {prepared}; '
               f'if [ "$AUTOCLUSTERS_NODE" = "{clears}" ]; then while [ ! -e {gate} ]; do sleep 0.1; done; fi')
    log = tmp_path / "controller.log"
    port = free_port()
    proc = start(approver_kubeconfig, pool, prepare, log, "--metrics-port", str(port), "--metrics-address", "127.0.0.1")
    try:
        wait_for(f"the preparation step for {clears}",
                 lambda: prepared.exists() and clears in prepared.read_text(), timeout=30)
        clear_fault(kube, names, clears)
        unmark(as_controller, names, clears)
        gate.touch()

        wait_for(f"approval of {due}", lambda: labels(kube, due).get(names.maintenance_approved) == "true", timeout=30)
        wait_for(f"{clears} recorded as not needed",
                 lambda: "MaintenanceApprovalNotNeeded" in reasons(kube, clears), timeout=30)
        lines = prepared.read_text().splitlines()
        assert f"{due} {pool} NvidiaXIDError" in lines
        assert not any(line.startswith(healthy) or line.startswith(elsewhere) for line in lines)

        assert names.maintenance_approved not in labels(kube, clears)
        assert names.maintenance_approved not in labels(kube, healthy)
        assert names.maintenance_approved not in labels(kube, elsewhere)  # its pool is not handled
        # the annotation and then the event follow the label, in that order
        wait_for(f"{due}'s approval event", lambda: "MaintenancePreparedAndApproved" in reasons(kube, due), timeout=30)
        approved = kube.get_node(due)
        assert approved["metadata"]["annotations"][f"{names.domain}/approval-controller"].startswith("approved ")

        # A replacement: the approved node goes away, a new node of the pool needs a repair.
        kube.delete(f"/api/v1/nodes/{due}")
        (newcomer,) = cluster.create_gpu_nodes(pool, 1, prefix=f"{pool}-new")
        report_fault(kube, names, newcomer)
        mark(as_controller, names, newcomer)
        wait_for(f"approval of the new node {newcomer}",
                 lambda: labels(kube, newcomer).get(names.maintenance_approved) == "true", timeout=30)
        wait_for("the replaced node to leave the pool's ledger",
                 lambda: "repaired or replaced" in log.read_text(), timeout=10)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'autoclusters_informer_handler_errors_total{informer="nodes-needing-repair"} 0.0' in metrics
    finally:
        stop(proc)
        for obj in cluster.kube.list_nodes(label_selector=f"{names.pool_label} in ({pool},{other})"):
            cluster.kube.delete(f"/api/v1/nodes/{obj['metadata']['name']}")
    text = log.read_text()
    assert f"node {clears} (pool {pool}): done, no approval needed" in text, text
    assert f"pool {pool}: 0 queued, 1 approved and under repair, 0 preparation failed, 1 finished, 1 not needed" \
        in text, text


def test_a_failed_preparation_does_not_approve(cluster: ClusterHandle, as_controller: Kube,
                                               approver_kubeconfig: str, unique: str, tmp_path: Path) -> None:
    names, kube = cluster.names, cluster.kube
    pool = f"apprf-{unique}"
    (node,) = cluster.create_gpu_nodes(pool, 1, prefix=pool)
    report_fault(kube, names, node)
    mark(as_controller, names, node)
    attempts = tmp_path / "attempts"
    # Fails twice (the job did not checkpoint), then succeeds: the node is approved only after that.
    prepare = f'echo x >> {attempts}; [ "$(wc -l < {attempts})" -ge 3 ]'
    proc = start(approver_kubeconfig, pool, prepare, tmp_path / "controller.log")
    try:
        wait_for("the failed preparation to be recorded",
                 lambda: "MaintenancePreparationFailed" in reasons(kube, node), timeout=30)
        assert names.maintenance_approved not in labels(kube, node)
        wait_for("approval after the preparation succeeded",
                 lambda: labels(kube, node).get(names.maintenance_approved) == "true", timeout=30)
        assert len(attempts.read_text().splitlines()) == 3
    finally:
        stop(proc)
        kube.delete(f"/api/v1/nodes/{node}")
