"""Least privilege: the detector of node A writes node A's fault conditions and nothing else."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.clock import SystemClock
from autoclusters.deploy.detector import detector_rbac
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.node import NodePaths, build_agent
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube import Forbidden, load_kube
from autoclusters.kube.client import STRATEGIC, Kube
from autoclusters.kube.light import load_light_kube
from autoclusters.sim.hardware import SimulatedHardware
from tests.integration.helpers import agent_writes_true_condition, wait_for

SA = "autoclusters-detector"


def own_condition(kube: Kube, node: str, ctype: str, message: str) -> dict[str, Any]:
    return kube.patch_node_status(node, {"status": {"conditions": [
        {"type": ctype, "status": "False", "reason": "NoGpuFaultDetected", "message": message}]}}, STRATEGIC)


def policy_active(kube: Kube, other_node: str, ctype: str) -> bool:
    """A dry-run write to another node (admission runs, nothing is stored) is denied."""
    body = {"status": {"conditions": [{"type": ctype, "status": "False", "reason": "Probe", "message": "probe"}]}}
    return _forbidden(lambda: kube.patch(f"/api/v1/nodes/{other_node}/status", body, STRATEGIC, dryRun="All"))


def denied(fn: Any) -> str:
    with pytest.raises(Forbidden) as e:
        fn()
    return str(e.value)


@pytest.fixture()
def setup(cluster: ClusterHandle, unique: str) -> Iterator[tuple[ClusterHandle, str, list[str]]]:
    ns = f"det-rbac-{unique}"
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    cluster.apply(detector_rbac(cluster.names, ns))
    nodes = cluster.create_gpu_nodes(f"detrbac-{unique}", 2, prefix=f"detrbac-{unique}")
    yield cluster, ns, nodes
    for n in nodes:
        cluster.kube.delete(f"/api/v1/nodes/{n}")
    for o in detector_rbac(cluster.names, ns):
        if o["kind"] != "ServiceAccount":
            cluster.kube.delete(_path(o))
    cluster.kube.delete(f"/api/v1/namespaces/{ns}")


def _path(o: dict[str, Any]) -> str:
    kind, name = o["kind"], o["metadata"]["name"]
    if kind.startswith("ValidatingAdmissionPolicy"):
        plural = "validatingadmissionpolicies" if kind == "ValidatingAdmissionPolicy" else \
            "validatingadmissionpolicybindings"
        return f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
    plural = "clusterroles" if kind == "ClusterRole" else "clusterrolebindings"
    return f"/apis/rbac.authorization.k8s.io/v1/{plural}/{name}"


def test_the_agent_of_node_a_cannot_write_node_b(setup: tuple[ClusterHandle, str, list[str]]) -> None:
    cluster, ns, (a, b) = setup
    names = cluster.names
    agent_a = load_kube(cluster.service_account_kubeconfig(ns, SA, node=a))
    gpu = names.gpu_condition

    # The policy takes a moment to reach the API server's admission plugin.
    wait_for("the own-node policy to deny node B", lambda: policy_active(agent_a, b, gpu), timeout=30)
    msg = denied(lambda: own_condition(agent_a, b, gpu, "written by A"))
    assert f"may not write node {b}" in msg
    own_condition(agent_a, a, gpu, "written by A")  # its own node: allowed

    # Not even on its own node: another agent's condition, labels, the node object itself.
    assert "own conditions" in denied(lambda: agent_a.patch_node_status(a, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Hijack", "message": "x"}]}}, STRATEGIC))
    denied(lambda: agent_a.patch_node(a, {"metadata": {"labels": {"x": "y"}}}))
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "x.", "namespace": "default"},
          "involvedObject": {"kind": "Node", "name": b, "apiVersion": "v1"}, "reason": "NvidiaXIDError",
          "message": "fake", "type": "Warning"}
    assert "own node" in denied(lambda: agent_a.create("/api/v1/namespaces/default/events", ev))

    # A token of the same account that is not bound to a node may write nothing.
    unbound = load_kube(cluster.service_account_kubeconfig(ns, SA))
    assert "not bound to a node" in denied(lambda: own_condition(unbound, a, gpu, "x"))

    b_conds = {c["type"]: c for c in cluster.kube.get_node(b)["status"].get("conditions") or []}
    assert gpu not in b_conds


def _forbidden(fn: Any) -> bool:
    try:
        fn()
    except Forbidden:
        return True
    return False


def test_the_real_agent_runs_under_its_least_privilege(setup: tuple[ClusterHandle, str, list[str]],
                                                        tmp_path: Path) -> None:
    """The node agent (file kernel log, no NVML/DCGM/InfiniBand) as node A's service account."""
    cluster, ns, (a, b) = setup
    names = cluster.names
    kube = load_light_kube(cluster.service_account_kubeconfig(ns, SA, node=a))  # the agent's lean transport
    hw = SimulatedHardware(tmp_path, a)
    hw.ensure()
    paths = NodePaths(kernel_log_file=str(hw.kmsg), infiniband=str(tmp_path / "no-ib"),
                      nvidia_proc=str(tmp_path / "no-proc"), dcgm_command=("no-such-dcgmi",), use_nvml=False,
                      gpu_map={"0000:4e:00": 3})
    config = AgentConfig(window_s=1.0, poll_s=0.2, snapshot_poll_s=0.2)
    agent, writer, events = build_agent(a, kube, SystemClock(), load_catalog(), names, config, paths)
    wait_for("the own-node policy to be active", lambda: policy_active(kube, b, names.gpu_condition), timeout=30)
    try:
        hw.inject({"kind": "xid", "code": 79, "gpu": 3}, load_catalog())

        cond = agent_writes_true_condition(cluster, agent, writer, a, names.gpu_condition)
        assert cond["message"] == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
        assert writer.failures == 0

        hw.inject({"kind": "xid", "code": 13, "gpu": 3}, load_catalog())  # a warning: an event, created

        def warning_event() -> dict[str, Any] | None:
            agent.poll()
            events.flush()
            items = cluster.kube.list_items("/api/v1/namespaces/default/events",
                                            field_selector=f"involvedObject.name={a}")
            return next((e for e in items if e.get("type") == "Warning" and "Xid 13" in e.get("message", "")), None)

        ev = wait_for("warning event written by the agent", warning_event, timeout=20)
        assert (ev["reportingComponent"], ev["reportingInstance"]) == ("autoclusters-detector", a)
        time.sleep(0.1)
    finally:
        writer.close()
        events.flush()
