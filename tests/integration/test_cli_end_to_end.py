"""The operator's loop against the real controller: ``status`` shows the proposed repair, ``approve``
starts it, ``history`` tells it afterwards, read from the records the controller itself wrote.

The test plays the detector (it writes the fault condition, and clears it once the simulated
reset gives the node a new boot ID). The controller runs as a process under a private domain and
its own lease, so it touches nothing of the other tests sharing the cluster.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.names import Names
from tests.integration.helpers import wait_for
from tests.integration.ops_support import (
    clear_fault,
    cli,
    create_nodes,
    create_pool,
    delete_pool_nodes,
    labels,
    private_domain,
    report_fault,
    running_controller,
)


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3)) as n:
        yield n


@pytest.fixture()
def controller(cluster: ClusterHandle, names: Names, unique: str, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "controller.log"
    with running_controller(cluster, names, f"ops-e2e-{unique}", log):
        yield log


def as_json(kubeconfig: str, *args: str) -> Any:
    res = cli(kubeconfig, *args, "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_propose_repair_seen_approved_and_recorded(cluster: ClusterHandle, names: Names, controller: Path,
                                                   unique: str) -> None:
    kc, kube = cluster.kubeconfig, cluster.kube
    flags = ["--domain", names.domain, "--condition-prefix", names.prefix]
    pool = f"e2e-{unique}"
    create_pool(kube, names, pool, "propose")
    node, spare = create_nodes(cluster, names, pool, 2)
    try:
        boot_before = kube.get_node(node)["status"]["nodeInfo"]["bootID"]
        report_fault(kube, names, node)

        def awaiting() -> dict[str, Any] | None:
            snap = as_json(kc, "status", "--pool", pool, *flags)
            faulty = [f for f in snap["faultyNodes"] if f["node"] == node]
            ok = faulty and faulty[0]["repair"] and faulty[0]["repair"]["phase"] == "AwaitingApproval"
            return snap if ok else None

        snap = wait_for(f"{node} awaiting approval in `status` (controller log: {controller})", awaiting, timeout=60)
        (p,) = snap["pools"]
        assert (p["consentMode"], p["nodes"], p["faulty"], p["awaitingApproval"]) == ("propose", 2, 1, 1)
        assert snap["faultyNodes"][0]["labels"]["maintenanceRequired"] is True

        res = cli(kc, "approve", "--pool", pool, *flags)
        assert res.returncode == 0, res.stderr
        assert f"{node}" in res.stdout and "approved" in res.stdout and spare not in res.stdout

        # The detector's part: the simulated reset gives the node a new boot ID; the fault is gone.
        wait_for(f"the simulated reset of {node}",
                 lambda: kube.get_node(node)["status"]["nodeInfo"]["bootID"] != boot_before, timeout=60)
        clear_fault(kube, names, node)

        def finished() -> dict[str, Any] | None:
            repairs = as_json(kc, "history", node, *flags)["repairs"]
            return repairs[0] if repairs and repairs[0]["phase"] == "Succeeded" else None

        repair = wait_for(f"the repair of {node} to succeed (log: {controller})", finished, timeout=60)
        assert (repair["pool"], repair["consentMode"], repair["action"], repair["outcome"]) == \
            (pool, "propose", "reset", "Succeeded")
        assert (repair["fault"]["class"], repair["fault"]["code"]) == ("gpu", "79")
        phases = [s["phase"] for s in repair["steps"]]
        assert phases[0] == "AwaitingApproval" and phases[-1] == "Succeeded"
        assert {"Scheduled", "Draining", "Acting", "Verifying"} <= set(phases)
        assert repair["durationSeconds"] > 0

        timeline = cli(kc, "history", node, *flags)
        assert timeline.returncode == 0 and "Verifying" in timeline.stdout and "+" in timeline.stdout

        wait_for("the controller to remove the labels",
                 lambda: names.maintenance_required not in labels(kube, node), timeout=30)
        assert names.maintenance_approved not in labels(kube, node)
        after = as_json(kc, "status", "--pool", pool, *flags)
        assert after["faultyNodes"] == []
        again = cli(kc, "approve", node, *flags)
        assert again.returncode == 0 and "not-needed" in again.stdout
    finally:
        delete_pool_nodes(cluster, names, pool)
