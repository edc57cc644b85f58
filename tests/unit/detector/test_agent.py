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
from autoclusters.detector.source_records import Poll, SourceState, SourceStatus
from autoclusters.detector.writer import ConditionWriter, WriterConfig
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube.events import ObjectRef
from autoclusters.names import Names
from autoclusters.sim.hardware import SimulatedHardware
from tests.unit.detector.node_conditions import NodeConditions

NAMES = Names()
CAT = load_catalog()
GPU = NAMES.gpu_condition
IC = NAMES.interconnect_condition
HEALTH = NAMES.detector_health_condition


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str, bool]] = []
        self.flushed = False

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.sent.append((ref.kind, ref.name, reason, message, warning))

    def flush(self) -> None:
        self.flushed = True


class Broken:
    name = "nvml"

    def state(self) -> SourceState:
        return SourceState(SourceStatus.ON)

    def poll(self) -> Poll:
        raise RuntimeError("segfault-ish")


def setup(tmp_path: Path, extra: list[Scheduled] | None = None
          ) -> tuple[NodeConditions, FakeClock, SimulatedHardware, ConditionWriter, Events, NodeAgent]:
    kube = NodeConditions(["n1"])
    clock = FakeClock()
    hw = SimulatedHardware(tmp_path, "n1")
    hw.ensure()
    writer = ConditionWriter(kube.kube, clock, WriterConfig(min_interval_s=0, qps=1000))
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

    from autoclusters.detector.detector_metrics import render, serve

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
        server.server_close()  # the listening socket too (a ResourceWarning under -W error)
        writer.close()


class RankingBug:
    """The real catalog, failing when the conditions rank a confirmed Xid 79 (a bug of the
    agent's own, outside its sources: every poll raises while the fault is confirmed)."""

    def __init__(self) -> None:
        self.broken = True

    def __getattr__(self, name: str) -> object:
        return getattr(CAT, name)

    def action_of(self, fault_class: object, code: object, name: str) -> object:
        if self.broken and str(code) == "79":
            raise KeyError("action")
        return CAT.action_of(fault_class, code, name)  # type: ignore[arg-type]


def test_a_poll_that_raises_is_counted_reported_on_the_node_and_the_loop_goes_on(tmp_path: Path, caplog) -> None:
    """The node's loop (``detector run --node``): a poll that raises is counted
    (autoclusters_detector_poll_errors_total), logged with its traceback once and in one line
    while it repeats, and reported on the node (the health condition, DetectorPollFailed, naming
    the error and the unreadable sources); the other conditions keep what they said, and the
    first poll that gets through clears it. Before the fix the first such poll ended the loop."""
    import logging

    from autoclusters.detector.agent_config import AgentConfig
    from autoclusters.detector.detector_metrics import render
    from autoclusters.detector.node import NodeLoop

    kube, clock, hw, writer, events, agent = setup(tmp_path, [Scheduled(Broken())])
    agent.catalog = bug = RankingBug()  # type: ignore[assignment]
    loop = NodeLoop(agent, writer, events, AgentConfig(poll_s=0.01))  # type: ignore[arg-type]

    def tick_loop(seconds: float) -> None:
        clock.advance(seconds)
        loop.poll_once()
        writer.step()
        writer.wait_idle()

    with caplog.at_level(logging.WARNING, logger="autoclusters.detector.node"):
        tick_loop(1)
        hw.inject({"kind": "xid", "code": 79, "gpu": 3}, CAT)
        tick_loop(1)
        assert loop.poll_errors == 0 and kube.condition("n1", HEALTH)["reason"] == "FaultSourceUnreadable"
        tick_loop(60)  # confirmed: ranking it raises, at every poll from now on
        tick_loop(1)
    assert loop.poll_errors == 2
    ours = [r for r in caplog.records if r.name == "autoclusters.detector.node"]
    assert [r.exc_info is not None for r in ours] == [True, False]  # the traceback once
    health = kube.condition("n1", HEALTH)
    assert (health["status"], health["reason"]) == ("True", "DetectorPollFailed")
    assert health["message"] == "The detector's poll failed: KeyError: 'action'; cannot read nvml: " \
                                "RuntimeError: segfault-ish Sources: dcgm on; infiniband on; kmsg on; nvml on."
    assert kube.condition("n1", GPU)["status"] == "False"  # kept: what it said before the failing polls
    assert "autoclusters_detector_poll_errors_total 2" in render([agent], writer, clock.monotonic(),
                                                                 poll_errors=loop.poll_errors)
    bug.broken = False
    tick_loop(1)
    assert loop.poll_errors == 2 and kube.condition("n1", HEALTH)["reason"] == "FaultSourceUnreadable"
    assert kube.condition("n1", GPU)["reason"] == "NvidiaXIDError"
    writer.close()


def test_the_node_loop_goes_on_after_polls_that_raise_and_stops_when_told(tmp_path: Path) -> None:
    import threading
    import time

    from autoclusters.detector.agent_config import AgentConfig
    from autoclusters.detector.node import NodeLoop

    _, clock, hw, writer, events, agent = setup(tmp_path)
    agent.catalog = RankingBug()  # type: ignore[assignment]
    hw.inject({"kind": "xid", "code": 79, "gpu": 3}, CAT)
    agent.poll()
    clock.advance(60)  # confirmed: every poll from here raises
    loop = NodeLoop(agent, writer, events, AgentConfig(poll_s=0.001))  # type: ignore[arg-type]
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while loop.poll_errors < 3 and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert loop.poll_errors >= 3 and t.is_alive()
    stop.set()
    t.join(10)
    assert not t.is_alive() and events.flushed  # ended through its own shutdown, the events flushed


def test_condition_codes_raise_a_warning_code_and_others_stay_events(tmp_path: Path) -> None:
    """``--condition-codes gpu:13``: Xid 13 raises the condition (its action stays none), Xid 31
    stays an event."""
    kube, clock, hw, writer, events, agent = setup(tmp_path)
    agent.condition_codes = frozenset({"gpu:13"})
    tick(agent, writer, clock)
    hw.inject({"kind": "xid", "code": 13, "gpu": 3}, CAT)
    hw.inject({"kind": "xid", "code": 31, "gpu": 2}, CAT)
    tick(agent, writer, clock, 1)
    tick(agent, writer, clock, 60)
    c = kube.condition("n1", GPU)
    assert (c["status"], c["message"]) == ("True", "GPU 3 reported Xid 13 (Graphics Engine Exception).")
    assert [e[3] for e in events.sent] == ["GPU 2 reported Xid 31 (GPU memory page fault)."]


def test_condition_codes_flag_is_checked() -> None:
    import pytest

    from autoclusters.cli.detector import _condition_codes
    from autoclusters.cli.exit_codes import CliError

    assert _condition_codes(" gpu:13, dcgm:DCGM_FR_THERMAL_VIOLATIONS ,") == {
        "gpu:13", "dcgm:DCGM_FR_THERMAL_VIOLATIONS"}
    with pytest.raises(CliError, match="expected CLASS:CODE"):
        _condition_codes("13")


def test_an_injected_xid_154_asks_for_a_node_reboot_as_the_driver_words_it(tmp_path: Path) -> None:
    kube, clock, hw, writer, _, agent = setup(tmp_path)
    hw.inject({"kind": "xid", "code": 154, "gpu": 3}, CAT)
    assert "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" in hw.kmsg.read_text()
    tick(agent, writer, clock, 1)
    tick(agent, writer, clock, 60)
    c = kube.condition("n1", GPU)
    assert c["message"] == "GPU 3 reported Xid 154 (GPU recovery action: Node Reboot Required)."
    ref = CAT.fault_from_condition(c, NAMES)
    assert ref is not None and ref.action == "reset"
