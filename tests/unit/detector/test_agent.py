"""A node agent over simulated hardware: injected faults travel the whole local path."""

from __future__ import annotations

from pathlib import Path

from autoclusters.clock import FakeClock
from autoclusters.detector.agent import NodeAgent, Scheduled
from autoclusters.detector.dcgm import DcgmSource
from autoclusters.detector.infiniband import InfinibandSource
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.kmsg import KernelLogFileSource
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import Poll
from autoclusters.detector.writer import ConditionWriter, WriterConfig
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube.events import ObjectRef
from autoclusters.names import Names
from autoclusters.sim.hardware import SimulatedHardware
from tests.unit.detector.fakes import FakeKube

NAMES = Names()
CAT = load_catalog()
GPU = NAMES.gpu_condition
IC = NAMES.interconnect_condition
HEALTH = NAMES.detector_health_condition


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str, bool]] = []

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.sent.append((ref.kind, ref.name, reason, message, warning))


class Broken:
    name = "nvml"

    def poll(self) -> Poll:
        raise RuntimeError("segfault-ish")


def setup(tmp_path: Path, extra: list[Scheduled] | None = None
          ) -> tuple[FakeKube, FakeClock, SimulatedHardware, ConditionWriter, Events, NodeAgent]:
    kube = FakeKube(["n1"])
    clock = FakeClock()
    hw = SimulatedHardware(tmp_path, "n1")
    hw.ensure()
    writer = ConditionWriter(kube, clock, WriterConfig(min_interval_s=0, qps=1000))  # type: ignore[arg-type]
    events = Events()
    sources = [Scheduled(KernelLogFileSource(str(hw.kmsg), KernelLogInterpreter(CAT, GpuIndex.simulated()))),
               Scheduled(DcgmSource(CAT, output_file=str(hw.dcgm_json))),
               Scheduled(InfinibandSource(CAT, clock, str(hw.ib_root))), *(extra or [])]
    agent = NodeAgent("n1", sources, catalog=CAT, names=NAMES, writer=writer, events=events, clock=clock,
                      window_s=60)
    return kube, clock, hw, writer, events, agent


def tick(agent: NodeAgent, writer: ConditionWriter, clock: FakeClock, seconds: float = 1) -> None:
    clock.advance(seconds)
    agent.poll()
    writer.step()
    writer.wait_idle()


def test_injected_xid_to_condition_and_back_after_a_reboot(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path)
    tick(agent, writer, clock)
    assert kube.condition("n1", GPU)["reason"] == "NoGpuFaultDetected"
    hw.inject({"kind": "xid", "code": 79, "gpu": 3}, CAT)
    tick(agent, writer, clock, 1)  # first seen
    tick(agent, writer, clock, 59)
    assert kube.condition("n1", GPU)["status"] == "False"  # inside the window
    tick(agent, writer, clock, 1)
    c = kube.condition("n1", GPU)
    assert (c["status"], c["reason"], c["message"]) == ("True", "NvidiaXIDError",
                                                        "GPU 3 reported Xid 79 (GPU has fallen off the bus).")
    hw.reboot(CAT)
    agent.reboot()
    tick(agent, writer, clock)
    assert kube.condition("n1", GPU)["status"] == "False"
    writer.close()


def test_a_persistent_fault_survives_the_reboot(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path)
    tick(agent, writer, clock)
    hw.inject({"kind": "xid", "code": 79, "gpu": 3}, CAT, persistent=True)
    tick(agent, writer, clock, 1)
    tick(agent, writer, clock, 60)
    assert kube.condition("n1", GPU)["status"] == "True"
    hw.reboot(CAT)
    agent.reboot()
    for _ in range(70):
        tick(agent, writer, clock, 1)
        assert kube.condition("n1", GPU)["status"] == "True"  # never flaps to False
    hw.clear()
    hw.reboot(CAT)
    agent.reboot()
    tick(agent, writer, clock)
    assert kube.condition("n1", GPU)["status"] == "False"
    writer.close()


def test_interconnect_transient_ignored_and_lasting_fault_reported(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path)
    tick(agent, writer, clock)
    hw.inject({"kind": "hca", "hca": "mlx5_0", "port": 1}, CAT)
    tick(agent, writer, clock, 20)
    hw.clear()
    for _ in range(10):
        tick(agent, writer, clock, 10)
        assert kube.condition("n1", IC)["status"] == "False"
    hw.inject({"kind": "hca", "hca": "mlx5_2", "port": 1}, CAT)
    tick(agent, writer, clock, 1)
    tick(agent, writer, clock, 60)
    c = kube.condition("n1", IC)
    assert (c["status"], c["reason"], c["message"]) == ("True", "InterconnectError",
                                                        "HCA mlx5_2 port 1 reported port_down.")
    writer.close()


def test_a_failing_source_raises_only_the_health_condition(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path, [Scheduled(Broken())])
    hw.dcgm_json.write_text("{ truncated")
    for _ in range(5):
        tick(agent, writer, clock, 30)
    assert kube.condition("n1", GPU)["status"] == "False"
    h = kube.condition("n1", HEALTH)
    assert h["status"] == "True" and "dcgm" in h["message"] and "nvml" in h["message"]
    writer.close()


def test_warnings_become_one_event_per_boot(tmp_path: Path) -> None:
    kube, clock, hw, writer, events, agent = setup(tmp_path)
    hw.inject({"kind": "xid", "code": 13, "gpu": 0}, CAT)
    hw.inject({"kind": "xid", "code": 13, "gpu": 0}, CAT)
    tick(agent, writer, clock, 100)
    tick(agent, writer, clock, 100)
    assert events.sent == [("Node", "n1", "NvidiaXIDError",
                             "GPU 0 reported Xid 13 (Graphics Engine Exception).", True)]
    assert kube.condition("n1", GPU)["status"] == "False"
    writer.close()


def test_dcgm_fault_message(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path)
    hw.inject({"kind": "dcgm", "code": "DCGM_FR_NVLINK_DOWN", "gpu": 5}, CAT)
    tick(agent, writer, clock)
    tick(agent, writer, clock, 60)
    c = kube.condition("n1", GPU)
    assert (c["reason"], c["message"]) == ("NvidiaDCGMError", "GPU 5 reported DCGM_FR_NVLINK_DOWN.")
    writer.close()


def test_metrics_count_faults_by_class_and_state_and_unreadable_sources(tmp_path: Path) -> None:
    import urllib.request

    from autoclusters.detector.metrics import render, serve

    _kube, clock, hw, writer, _, agent = setup(tmp_path, [Scheduled(Broken())])
    hw.inject({"kind": "xid", "code": 79, "gpu": 3}, CAT)
    tick(agent, writer, clock)
    hw.inject({"kind": "hca", "hca": "mlx5_0", "port": 1}, CAT)
    tick(agent, writer, clock, 60)
    text = render([agent], writer, clock.monotonic())
    assert 'autoclusters_detector_active_faults{class="gpu",state="confirmed"} 1' in text
    assert 'autoclusters_detector_active_faults{class="interconnect",state="pending"} 1' in text
    assert 'autoclusters_detector_unreadable_sources{source="nvml"} 1' in text
    assert f"autoclusters_detector_condition_writes_total {writer.writes}" in text and writer.writes >= 2
    server = serve(0, lambda: render([agent], writer, clock.monotonic()), "127.0.0.1")
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "autoclusters_detector_nodes 1" in body
    finally:
        server.shutdown()
        writer.close()
