"""The approval example together with the real controller: the controller proposes, the example
prepares and approves (choosing the pool by its consent mode), the controller repairs, and the
example books the node as finished for its pool when the controller removes the labels."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.names import Names
from tests.integration.helpers import wait_for
from tests.integration.ops_support import (
    clear_fault,
    create_nodes,
    create_pool,
    delete_pool_nodes,
    labels,
    private_domain,
    report_fault,
    running_controller,
    stop_process,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approval-controller" / "approval_controller.py"


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3)) as n:
        yield n


def test_controller_proposes_example_approves_repair_finishes(cluster: ClusterHandle, names: Names, unique: str,
                                                              tmp_path: Path) -> None:
    kube = cluster.kube
    propose, auto = f"acp-{unique}", f"aca-{unique}"
    create_pool(kube, names, propose, "propose")
    create_pool(kube, names, auto, "auto")
    node, healthy = create_nodes(cluster, names, propose, 2)
    (auto_node,) = create_nodes(cluster, names, auto, 1)
    prepared = tmp_path / "prepared.txt"
    env = dict(os.environ, AUTOCLUSTERS_CONDITION_PREFIX=names.prefix)
    approver_log = tmp_path / "approver.log"
    with running_controller(cluster, names, f"ops-acp-{unique}", tmp_path / "controller.log"), \
            approver_log.open("wb") as out:
        approver = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--kubeconfig", cluster.kubeconfig, "--domain", names.domain,
             "--prepare", f'echo "$AUTOCLUSTERS_NODE $AUTOCLUSTERS_FAULT_MESSAGE" >> {prepared}',
             "--watch-timeout", "20"], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            boot_before = kube.get_node(node)["status"]["nodeInfo"]["bootID"]
            report_fault(kube, names, node)  # the detector's part
            report_fault(kube, names, auto_node)
            wait_for(f"the approved reset of {node} (approver log: {approver_log})",
                     lambda: kube.get_node(node)["status"]["nodeInfo"]["bootID"] != boot_before, timeout=90)
            assert prepared.read_text().splitlines() == [f"{node} GPU 3 reported Xid 79 (GPU has fallen off the bus)."]
            clear_fault(kube, names, node)  # the rebooted node reports no fault
            wait_for("the controller to finish the repair and remove the labels",
                     lambda: names.maintenance_required not in labels(kube, node), timeout=60)
            wait_for("the example to book the node as finished",
                     lambda: "repaired or replaced" in approver_log.read_text(), timeout=30)
            assert names.maintenance_approved not in labels(kube, healthy)
            # The auto pool's node is repaired without approval; the example leaves it alone.
            wait_for("the example to skip the auto pool's node",
                     lambda: f"node {auto_node} (pool {auto}) needs a repair but its pool is not handled here"
                     in approver_log.read_text(), timeout=30)
            assert names.maintenance_approved not in labels(kube, auto_node)
        finally:
            stop_process(approver)
            delete_pool_nodes(cluster, names, propose)
            delete_pool_nodes(cluster, names, auto)
    text = approver_log.read_text()
    assert f"node {node} (pool {propose}): prepared and approved" in text
    assert auto_node not in prepared.read_text()
    assert f"pool {propose}: 0 queued, 0 approved and under repair, 0 preparation failed, 1 finished, 0 not needed" \
        in text, text
