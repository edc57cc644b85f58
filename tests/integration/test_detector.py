"""From an injected kernel log line (or DCGM/InfiniBand state) to the node condition, on a
real API server: the simulated fleet serves fresh kwok nodes from a private spool."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoclusters.cli.main import main as cli
from autoclusters.clock import SystemClock
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.writer import WriterConfig
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.faults.catalog import FaultClass, load_catalog
from autoclusters.sim.fleet import SimulatedFleet
from tests.integration.helpers import heartbeat_after, wait_for

WINDOW = 1.5
HEARTBEAT = 1.0  # frequent: a check that a condition did not turn True reads a heartbeat written after the window
CONFIG = AgentConfig(window_s=WINDOW, poll_s=0.2, snapshot_poll_s=0.3,
                     writer=WriterConfig(heartbeat_s=HEARTBEAT, min_interval_s=0.2, qps=100))


@dataclass
class Fleet:
    cluster: ClusterHandle
    pool: str
    spool: Path
    nodes: list[str]

    def condition(self, node: str, ctype: str) -> dict[str, Any] | None:
        conds = (self.cluster.kube.get_node(node).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == ctype), None)

    def status(self, node: str, ctype: str) -> str | None:
        """The condition's status, None without the condition."""
        return (self.condition(node, ctype) or {}).get("status")

    def wait_status(self, node: str, ctype: str, status: str, timeout: float = 20) -> dict[str, Any]:
        return wait_for(f"{ctype}={status} on {node}",
                        lambda: (c := self.condition(node, ctype)) and c["status"] == status and c,
                        timeout=timeout)

    def inject(self, node: str, *args: str) -> None:
        assert cli(["inject-fault", node, *args, "--spool", str(self.spool)]) == 0

    def reboot(self, node: str) -> None:
        """What the simulated provider does at the end of a reset: a new boot id."""
        self.cluster.kube.patch_node_status(node, {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}})


@pytest.fixture()
def fleet(cluster: ClusterHandle, unique: str, tmp_path: Path) -> Iterator[Fleet]:
    pool = f"det-{unique}"
    nodes = cluster.create_gpu_nodes(pool, 3, prefix=pool)
    f = Fleet(cluster, pool, tmp_path / "spool", nodes)
    runner = SimulatedFleet(cluster.kube, SystemClock(), load_catalog(), cluster.names, f.spool,
                            f"{cluster.names.pool_label}={pool}", CONFIG)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        for n in nodes:  # the agents have read every source once: healthy baseline
            f.wait_status(n, cluster.names.gpu_condition, "False")
            f.wait_status(n, cluster.names.interconnect_condition, "False")
        yield f
    finally:
        stop.set()
        thread.join(timeout=10)
        for n in nodes:
            cluster.kube.delete(f"/api/v1/nodes/{n}")


def test_xid_line_to_condition_true_then_false_after_reboot(fleet: Fleet) -> None:
    names = fleet.cluster.names
    node, other = fleet.nodes[0], fleet.nodes[1]
    fleet.inject(node, "--xid", "79", "--gpu", "3")
    injected = time.monotonic()
    cond = fleet.wait_status(node, names.gpu_condition, "True")
    assert time.monotonic() - injected >= WINDOW - 0.2  # not before the persistence window
    assert cond["reason"] == "NvidiaXIDError"
    assert cond["message"] == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    ref = load_catalog().fault_from_condition(cond, names)
    assert ref is not None and (ref.fault_class, ref.code, ref.known) == (FaultClass.GPU, "79", True)
    assert fleet.status(other, names.gpu_condition) == "False"
    ready = fleet.condition(node, "Ready")
    assert ready is not None and ready["status"] == "True"  # the kubelet's (kwok's) condition is untouched

    fleet.reboot(node)
    cond = fleet.wait_status(node, names.gpu_condition, "False")
    assert (cond["reason"], cond["message"]) == ("NoGpuFaultDetected", "No GPU fault.")


def test_a_persistent_fault_comes_back_after_the_reboot(fleet: Fleet) -> None:
    names = fleet.cluster.names
    node = fleet.nodes[0]
    fleet.inject(node, "--sxid", "24007", "--persistent")
    cond = fleet.wait_status(node, names.gpu_condition, "True")
    assert (cond["reason"], cond["message"]) == ("NvidiaSXIDError", "NVSwitch reported SXID 24007.")
    fleet.reboot(node)
    deadline = time.monotonic() + 3 * WINDOW
    until = datetime.now(UTC) + timedelta(seconds=3 * WINDOW)
    while time.monotonic() < deadline:  # the broken switch is seen again at once: no flap to False
        assert fleet.status(node, names.gpu_condition) == "True"
        time.sleep(0.2)
    # and the writer's word after that time (not only no False seen by the polls) is still True
    assert heartbeat_after(f"{names.gpu_condition} on {node}", lambda: fleet.condition(node, names.gpu_condition),
                           until)["status"] == "True"
    fleet.inject(node, "--clear")
    fleet.reboot(node)
    fleet.wait_status(node, names.gpu_condition, "False")


def test_the_window_ignores_a_transient_port_flap(fleet: Fleet) -> None:
    names = fleet.cluster.names
    node = fleet.nodes[1]
    fleet.inject(node, "--hca", "mlx5_1", "--port", "1")
    time.sleep(WINDOW / 3)
    fleet.inject(node, "--clear")
    deadline = time.monotonic() + 2.5 * WINDOW
    until = datetime.now(UTC) + timedelta(seconds=2.5 * WINDOW)
    while time.monotonic() < deadline:
        assert fleet.status(node, names.interconnect_condition) == "False"
        time.sleep(0.2)
    # the writer's word from past the window the flap would have needed: still False
    assert heartbeat_after(f"{names.interconnect_condition} on {node}",
                           lambda: fleet.condition(node, names.interconnect_condition), until)["status"] == "False"
    fleet.inject(node, "--hca", "mlx5_1", "--port", "1")
    cond = fleet.wait_status(node, names.interconnect_condition, "True")
    assert (cond["reason"], cond["message"]) == ("InterconnectError", "HCA mlx5_1 port 1 reported port_down.")
    ref = load_catalog().fault_from_condition(cond, names)
    assert ref is not None and (ref.fault_class, ref.code) == (FaultClass.INTERCONNECT, "port_down")
    assert fleet.status(node, names.gpu_condition) == "False"


def test_dcgm_fault_and_a_failing_source(fleet: Fleet) -> None:
    names = fleet.cluster.names
    node, broken = fleet.nodes[1], fleet.nodes[2]
    fleet.inject(node, "--dcgm", "DCGM_FR_NVLINK_DOWN", "--gpu", "5")
    cond = fleet.wait_status(node, names.gpu_condition, "True")
    assert (cond["reason"], cond["message"]) == ("NvidiaDCGMError", "GPU 5 reported DCGM_FR_NVLINK_DOWN.")

    (fleet.spool / broken / "dcgm.json").write_text("Error: unable to establish a connection to the host engine")
    health = fleet.wait_status(broken, names.detector_health_condition, "True")
    assert health["reason"] == "FaultSourceUnreadable" and "dcgm" in health["message"]
    past_window = datetime.now(UTC) + timedelta(seconds=2 * WINDOW)
    cond = heartbeat_after(f"{names.gpu_condition} on {broken}",
                           lambda: fleet.condition(broken, names.gpu_condition), past_window)
    assert cond["status"] == "False"  # never a GPU fault


def test_a_warning_xid_is_an_event_not_a_condition(fleet: Fleet) -> None:
    names = fleet.cluster.names
    node = fleet.nodes[2]
    fleet.inject(node, "--xid", "13", "--gpu", "1")

    def event() -> dict[str, Any] | None:
        items = fleet.cluster.kube.list_items("/api/v1/namespaces/default/events",
                                        field_selector=f"involvedObject.name={node}")
        return next((e for e in items if e.get("reason") == "NvidiaXIDError"), None)

    ev = wait_for("warning event", event, timeout=20)
    assert ev["type"] == "Warning" and ev["message"].startswith("GPU 1 reported Xid 13 (")
    past_window = datetime.now(UTC) + timedelta(seconds=2 * WINDOW)
    cond = heartbeat_after(f"{names.gpu_condition} on {node}", lambda: fleet.condition(node, names.gpu_condition),
                           past_window)
    assert cond["status"] == "False"


def test_the_cli_serves_simulated_nodes_and_stops_cleanly(cluster: ClusterHandle, unique: str,
                                                          tmp_path: Path) -> None:
    """``detector run --simulate`` and ``inject-fault`` as an operator runs them, spool found by env;
    its metrics endpoint serves the fleet's node watch and failed polls."""
    import os
    import subprocess
    import sys
    import urllib.request

    from autoclusters.devcluster.processes import free_port

    pool = f"detcli-{unique}"
    (node,) = cluster.create_gpu_nodes(pool, 1, prefix=pool)
    env = {**os.environ, "AUTOCLUSTERS_DETECTOR_SPOOL": str(tmp_path / "spool")}
    cmd = [sys.executable, "-m", "autoclusters.cli.main"]
    port = free_port()
    agent = subprocess.Popen([*cmd, "detector", "run", "--simulate", "--kubeconfig", cluster.kubeconfig,
                              "--node-selector", f"{cluster.names.pool_label}={pool}", "--window", "1",
                              "--poll-interval", "0.2", "--metrics-port", str(port), "--metrics-address",
                              "127.0.0.1"], env=env, stderr=subprocess.PIPE, text=True)
    fleet = Fleet(cluster, pool, tmp_path / "spool", [node])
    try:
        fleet.wait_status(node, cluster.names.gpu_condition, "False", timeout=30)
        out = subprocess.run([*cmd, "inject-fault", node, "--xid", "79", "--gpu", "6", "-o", "json"], env=env,
                             capture_output=True, text=True, check=True)
        assert '"node": "' + node in out.stdout
        cond = fleet.wait_status(node, cluster.names.gpu_condition, "True")
        assert cond["message"] == "GPU 6 reported Xid 79 (GPU has fallen off the bus)."
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "autoclusters_detector_nodes 1" in metrics
        assert 'autoclusters_informer_handler_errors_total{informer="simulated-nodes"} 0' in metrics
        assert "autoclusters_detector_poll_errors_total 0" in metrics
    finally:
        agent.terminate()
        rc = agent.wait(timeout=15)
        cluster.kube.delete(f"/api/v1/nodes/{node}")
    assert rc == 0, agent.stderr.read() if agent.stderr else ""
