"""The stack as a user deploys it, on the local cluster's real nodes: ``pulumi up`` through the
CLI with ``local`` off and the locally built image, so that every part runs as pods and
becomes Ready there (issue 23, item 2), then one repair on those pods: a fault written into
one node's own kernel log reaches its detector pod, the controller pods label, cordon and drain
the node and reboot it through the shipped reboot Job, and the node comes back clean.

The nodes' kernel logs are their own (a pseudo-terminal over each node's ``/dev/kmsg``,
devcluster/machine.py): the fault line is never written into this machine's kernel log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters import api
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.realnodes import RealNode
from autoclusters.kube import Kube
from autoclusters.names import Names
from autoclusters.providers.hostreboot import boot_id
from tests.integration.helpers import kubectl, wait_for
from tests.integration.real_nodes_support import XID79, deployed_stack, ready_parts, repaired
from tests.integration.test_pulumi_cli import Project


@pytest.fixture()
def deployed(real_cluster: ClusterHandle, tmp_path: Path) -> Iterator[tuple[Project, str, str, list[RealNode]]]:
    with deployed_stack(real_cluster, tmp_path) as d:
        yield d.proj, d.ns, d.pool, d.nodes


def test_pulumi_up_runs_every_part_as_pods_on_the_real_nodes(
        real_cluster: ClusterHandle, deployed: tuple[Project, str, str, list[RealNode]],
        capsys: pytest.CaptureFixture[str]) -> None:
    proj, ns, pool, nodes = deployed
    t0 = time.monotonic()
    proj.pulumi("up", "--yes", timeout=900)
    took = time.monotonic() - t0
    real = {n.name for n in nodes}
    by_part = wait_for("every part Ready as pods on the real nodes", lambda: ready_parts(real_cluster, ns, real),
                       timeout=120)
    with capsys.disabled():  # in the suite's output: the pods ran on the real nodes
        print(f"\npulumi up on the real nodes: {took:.1f}s, every part Ready after {time.monotonic() - t0:.1f}s\n"
              + kubectl(real_cluster.kubeconfig, "get", "pods", "-o", "wide", "-n", ns), file=sys.stderr)
    assert {p["spec"]["nodeName"] for p in by_part["autoclusters-detector"]} == real  # one per GPU node
    for pod in (p for pods in by_part.values() for p in pods):  # none of them crashed on its way up
        assert all(c["restartCount"] == 0 for c in pod["status"]["containerStatuses"]), pod["status"]
    # The API server reaches the webhook pods through their Service (failurePolicy Fail): a pool
    # change is admitted, and a webhook pod logged the review.
    path = Kube.custom_path(Names().api_group, api.VERSION, "gpunodepools", pool)
    real_cluster.kube.patch(path, {"spec": {"consentMode": "propose"}})

    def reviewed() -> bool:
        logs = kubectl(real_cluster.kubeconfig, "logs", "-n", ns, "-l", "app.kubernetes.io/name=autoclusters-webhook",
                       "-c", "webhook", "--tail=-1")
        return f"op=UPDATE GpuNodePool/{pool}" in logs

    wait_for("the webhook pods' review of the pool change", reviewed, timeout=30)


def test_a_fault_in_a_real_nodes_kernel_log_is_repaired_by_the_pods(
        real_cluster: ClusterHandle, deployed: tuple[Project, str, str, list[RealNode]]) -> None:
    proj, _ns, _pool, nodes = deployed
    proj.pulumi("up", "--yes", timeout=900)
    names = Names()
    node = nodes[0]
    kube = real_cluster.kube
    before = boot_id(kube.get_node(node.name))
    t0 = time.monotonic()
    node.write_kernel_log(f"4,1201,{int(time.monotonic() * 1e6)},-;{XID79}")

    def labelled() -> bool:
        n = kube.get_node(node.name)
        return (n["metadata"].get("labels") or {}).get(names.maintenance_required) == "true"

    wait_for("the maintenance label", labelled, timeout=120)
    marked = time.monotonic() - t0
    wait_for("the cordon", lambda: bool(kube.get_node(node.name)["spec"].get("unschedulable")), timeout=120)
    cordoned = time.monotonic() - t0

    wait_for("the node rebooted, verified and uncordoned", lambda: repaired(kube, node.name, before), timeout=300)
    done = time.monotonic() - t0
    print(f"\nreal-node repair: labelled {marked:.1f}s, cordoned {cordoned:.1f}s, repaired {done:.1f}s",
          file=sys.stderr)
    path = Kube.custom_path(names.api_group, api.VERSION, "remediations")
    records = [r for r in kube.list_items(path) if r["spec"]["node"] == node.name]
    assert records and records[-1]["status"]["phase"] == "Succeeded", records
