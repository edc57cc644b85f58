"""On a real API server: a GPU node's detector without NVML writes the warning health condition
with every source's state, and ``autoclusters status`` reads each node's sources back from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.clock import SystemClock
from autoclusters.detector import node as node_module
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.node import NodePaths, build_agent
from autoclusters.detector.nvml import NO_BINDINGS
from autoclusters.detector.source_records import SourceState, SourceStatus
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.faults.catalog import load_catalog
from autoclusters.ops.snapshot import take_snapshot


@pytest.fixture()
def gpu_node(cluster: ClusterHandle, unique: str) -> Iterator[str]:
    (name,) = cluster.create_gpu_nodes(f"srcstate-{unique}", 1, prefix=f"srcstate-{unique}")
    yield name
    cluster.kube.delete(f"/api/v1/nodes/{name}")


def test_a_gpu_node_without_nvml_is_reported_and_status_shows_its_sources(
        cluster: ClusterHandle, gpu_node: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = cluster.names
    proc = tmp_path / "gpus"
    (proc / "0000:3b:00.0").mkdir(parents=True)  # the driver lists a GPU: NVML is implied
    monkeypatch.setattr(node_module, "load_library", lambda *_: (None, None))  # an image without the bindings
    paths = NodePaths(kernel_log_file=str(tmp_path / "kern.log"), infiniband=str(tmp_path / "no-ib"),
                      nvidia_proc=str(proc))
    agent, writer, _ = build_agent(gpu_node, cluster.kube, SystemClock(), load_catalog(), names,
                                   AgentConfig(window_s=1.0), paths)
    try:
        agent.poll()
        writer.step()
        writer.wait_idle()
        conds: dict[str, Any] = {c["type"]: c for c in cluster.kube.get_node(gpu_node)["status"]["conditions"]}
        health = conds[names.detector_health_condition]
        assert (health["status"], health["reason"]) == ("True", "ExpectedFaultSourceUnavailable")
        assert conds[names.gpu_condition]["status"] == "False"
        assert load_catalog().fault_from_condition(health, names) is None

        snap = take_snapshot(cluster.kube, names, SystemClock())
        (ours,) = [s for s in snap.detector_sources if s.node == gpu_node]
        assert ours.sources == {
            "dcgm": SourceState(SourceStatus.OFF, "no DCGM hostengine configured (--dcgm-host)"),
            "dcgm-exporter": SourceState(SourceStatus.OFF, "no dcgm-exporter URL configured (--dcgm-exporter-url)"),
            "infiniband": SourceState(SourceStatus.UNAVAILABLE, f"no {tmp_path}/no-ib: no InfiniBand on this node"),
            "file": SourceState(SourceStatus.ON),  # the agent reads a kernel log file here: the file source
            "nvml": SourceState(SourceStatus.UNAVAILABLE, NO_BINDINGS,
                                expected=True),
        }
        assert gpu_node in snap.degraded_detectors and all(f.node != gpu_node for f in snap.faulty)
    finally:
        writer.close()
