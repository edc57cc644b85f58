"""The Slurm bridge as it runs: pools and nodes from its informers on the real API server,
real Slurm daemons, a real batch job. A node warned the way the controller warns it (the
drain-deadline, drain-reason and remediation annotations; the maintenance-required label is
left out, as the admission rules keep it to the controller, and the bridge needs only its
absence to resume) has its Slurm node drained with the fault as reason, its job signalled and requeued, and the
repair acknowledged on the node; once the warning is gone the Slurm node is resumed and the
job runs again. The bridge learns of each change from its watch, not from a list per poll.
It runs as a user's bridge does, under its own service account with exactly the rules the
stack grants it (``deploy.slurm_bridge``), so a rule it lacks fails these tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.deploy import SLURM_BRIDGE_SERVICE_ACCOUNT
from autoclusters.deploy.slurm_bridge import slurm_bridge_rbac
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube, load_kube
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfig, gpu_node_pool_object
from autoclusters.pools.slurm_policy import SignalTarget, SlurmPolicy
from autoclusters.slurm import decisions as d
from autoclusters.slurm.bridge import ACKNOWLEDGER, SlurmBridge
from tests.integration.helpers import wait_for
from tests.integration.ops_support import create_nodes, private_domain
from tests.integration.slurm_support import SlurmHarness, slurm_harness

pytestmark = pytest.mark.integration


class Scene:
    def __init__(self, cluster: ClusterHandle, names: Names, node: str, slurm: SlurmHarness,
                 bridge: SlurmBridge) -> None:
        self.cluster, self.names, self.node, self.slurm, self.bridge = cluster, names, node, slurm, bridge
        self.pool = ""


@pytest.fixture()
def scene(cluster: ClusterHandle, unique: str, tmp_path: Path) -> Iterator[Scene]:
    """The pool, its node and the bridge under a domain of the test's own: the test plays the
    controller, and a controller that watches its domain (on a cluster a kubeconfig names,
    one may run on the default domain) would remove the warning written here by hand
    as a leftover with no repair behind it."""
    if not cluster.local:
        pytest.skip("Slurm's daemons run on this machine and mirror the local cluster's kwok nodes")
    with private_domain(cluster, unique) as names:
        pool = f"slurmb-{unique}"
        policy = SlurmPolicy(enabled=True, signal="TERM", signal_to=SignalTarget.BATCH, signal_lead_seconds=30)
        cluster.kube.create(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools"),
                            gpu_node_pool_object(PoolConfig(name=pool, slurm=policy), names))
        (node,) = create_nodes(cluster, names, pool, 1)
        namespace = f"slurmb-{unique}"
        cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": namespace}})
        rbac = slurm_bridge_rbac(names, namespace)
        cluster.apply(rbac)
        kube = load_kube(cluster.service_account_kubeconfig(namespace, SLURM_BRIDGE_SERVICE_ACCOUNT),
                         user_agent="autoclusters-slurm-bridge")
        harness = slurm_harness(tmp_path / "s", (node,))
        slurm = next(harness)
        bridge = SlurmBridge(kube, slurm.slurm, names=names, clock=SystemClock(), poll_seconds=0.5)
        runner = threading.Thread(target=bridge.run, name="slurm-bridge", daemon=True)
        runner.start()
        try:
            scene = Scene(cluster, names, node, slurm, bridge)
            scene.pool = pool
            yield scene
        finally:
            bridge.stop()
            runner.join(10)
            next(harness, None)
            cluster.kube.delete(f"/api/v1/nodes/{node}")
            cluster.kube.delete(Kube.custom_path(names.api_group, api.VERSION, "gpunodepools", pool))
            for obj in rbac:
                if obj["kind"] != "ServiceAccount":  # the namespace takes its service account along
                    cluster.kube.delete_object(obj)
            cluster.kube.delete(f"/api/v1/namespaces/{namespace}")


def open_record(s: Scene, record: str, deadline: Any) -> None:
    """The Remediation record behind a warning, as the controller writes it: open (Draining),
    this node's, holding the warning's deadline."""
    path = Kube.custom_path(s.names.api_group, api.VERSION, api.REMEDIATIONS.plural)
    s.cluster.kube.create(path, {
        "apiVersion": f"{s.names.api_group}/{api.VERSION}", "kind": api.REMEDIATIONS.kind,
        "metadata": {"name": record},
        "spec": {"node": s.node, "pool": s.pool, "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                                                           "message": "Xid 79 on GPU 3"}}})
    s.cluster.kube.patch(f"{path}/{record}/status", {"status": {"phase": "Draining",
                                                                "preDrainDeadline": utc_iso(deadline)}})


def reasons(cluster: ClusterHandle, node: str) -> set[str]:
    items = cluster.kube.list_items("/api/v1/namespaces/default/events", field_selector=f"involvedObject.name={node}")
    return {str(e.get("reason")) for e in items}


def test_a_warned_node_is_drained_its_job_requeued_acked_then_resumed(scene: Scene, tmp_path: Path) -> None:
    s, names, node = scene, scene.names, scene.node
    out, script = tmp_path / "job.out", tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n"
                      "echo \"start restart=${SLURM_RESTART_COUNT:-0}\"\n"
                      "trap 'echo got-TERM; exit 143' TERM\n"
                      "for i in $(seq 1 1500); do sleep 0.2; done\n")
    job = s.slurm.sbatch("-N1", "-w", node, "--requeue", "--open-mode=append", "-o", str(out), str(script))
    wait_for("the job to run", lambda: (j := s.slurm.job(job)) and j.state == "RUNNING", timeout=60)
    wait_for("the bridge's first poll", lambda: s.bridge.stats.polls > 0)

    record = f"{node}-xid-79"
    deadline = SystemClock().now() + timedelta(seconds=120)
    open_record(s, record, deadline)
    warning: dict[str, Any] = {"metadata": {
        "annotations": {names.drain_deadline: utc_iso(deadline), names.drain_reason: "Xid 79 on GPU 3",
                        names.remediation: record}}}
    s.cluster.kube.patch_node(node, warning)

    drained = wait_for("the Slurm node to be drained",
                       lambda: n if (n := s.slurm.slurm.nodes([node])[node]).drain else None)
    assert drained.reason == "autoclusters: Xid 79 on GPU 3"
    wait_for("the job to see its signal", lambda: "got-TERM" in out.read_text())
    requeued = wait_for("the job to be requeued", lambda: (j := s.slurm.job(job)) and j.restarts == 1 and j)
    assert requeued.pending
    ack = wait_for("the ack on the node", lambda: (s.cluster.kube.get_node(node)["metadata"].get("annotations")
                                                   or {}).get(names.drain_ack(ACKNOWLEDGER)))
    assert ack == record
    assert s.slurm.slurm.nodes([node])[node].drained

    # The repair is over: the controller removes its warning.
    s.cluster.kube.patch_node(node, {"metadata": {
        "annotations": {names.drain_deadline: None, names.drain_reason: None, names.remediation: None}}})
    wait_for("the Slurm node to be resumed", lambda: not s.slurm.slurm.nodes([node])[node].drain)
    wait_for("the requeued job to run again", lambda: "start restart=1" in out.read_text(), timeout=90)
    wait_for("the bridge's events", lambda: {d.EVENT_DRAINED, d.EVENT_SIGNALLED, d.EVENT_REQUEUED, d.EVENT_READY,
                                             d.EVENT_RESUMED} <= reasons(s.cluster, node))
    assert s.bridge.stats.errors == 0, s.bridge.stats.last_error


def test_a_forged_warning_drains_nothing_until_its_record_backs_it(scene: Scene) -> None:
    """Anyone who may patch the node can write the warning's annotations (here the cluster's
    admin); the bridge drains for the record, not for the annotations."""
    s, names, node = scene, scene.names, scene.node
    record = f"{node}-forged"
    deadline = SystemClock().now() + timedelta(seconds=120)
    patched = s.cluster.kube.patch_node(node, {"metadata": {"annotations": {
        names.drain_deadline: utc_iso(deadline), names.drain_reason: "forged", names.remediation: record}}})
    version = int(patched["metadata"]["resourceVersion"])
    # the bridge's watch has the forged warning, and two polls have looked at it since
    wait_for("the bridge to see the warning", lambda: int(
        (s.bridge.nodes.get(node) or {}).get("metadata", {}).get("resourceVersion", "0")) >= version)
    polls = s.bridge.stats.polls
    wait_for("two polls", lambda: s.bridge.stats.polls >= polls + 2)
    assert not s.slurm.slurm.nodes([node])[node].drain
    open_record(s, record, deadline)
    drained = wait_for("the Slurm node to be drained",
                       lambda: n if (n := s.slurm.slurm.nodes([node])[node]).drain else None)
    assert drained.reason == "autoclusters: forged"
    s.cluster.kube.patch_node(node, {"metadata": {
        "annotations": {names.drain_deadline: None, names.drain_reason: None, names.remediation: None}}})
    wait_for("the Slurm node to be resumed", lambda: not s.slurm.slurm.nodes([node])[node].drain)
