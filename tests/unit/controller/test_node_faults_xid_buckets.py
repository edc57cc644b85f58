"""Only what NVIDIA says is the node's fault repairs it: the shipped catalog's buckets through the
real detector (kernel-log interpreter, agent, condition writer) and the real controller logic
(the deterministic harness), end to end on the fake API.

Acceptance (issue 24, item 4): no code in NVIDIA's application or software buckets produces a
repair under ``auto``, with the shipped catalog; an unknown code produces an event and no repair.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import pytest

from autoclusters.clock import utc_iso
from autoclusters.detector.agent import NodeAgent, Scheduled
from autoclusters.detector.detector_metrics import render
from autoclusters.detector.kernel_log import KernelLogInterpreter, format_xid_line
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import Poll, SourceState, SourceStatus
from autoclusters.detector.writer import ConditionWriter, WriterConfig
from autoclusters.faults.buckets import APPLICATION_BUCKETS
from autoclusters.faults.catalog import FaultClass, load_catalog
from autoclusters.kube.events import EventRecorder
from autoclusters.names import EVENT_UNKNOWN_CODE
from tests.unit.controller.harness import NAMES, Harness, _set_condition

CAT = load_catalog()
BUS = "0000:3b:00"  # GPU 3
WINDOW = 60.0
APPLICATION_XIDS = sorted(int(e.code) for e in CAT.of_class(FaultClass.GPU)
                          if e.code.isdigit() and e.bucket in APPLICATION_BUCKETS)


class Lines:
    """A kernel log source over lines handed to it (the driver's words, read by the real
    interpreter), in place of /dev/kmsg."""

    name = "kmsg"

    def __init__(self, interp: KernelLogInterpreter) -> None:
        self.interp = interp
        self.pending: list[str] = []

    def state(self) -> SourceState:
        return SourceState(SourceStatus.ON, expected=True)

    def poll(self) -> Poll:
        records = tuple(r for r in (self.interp.record(line) for line in self.pending) if r is not None)
        self.pending = []
        return Poll(self.name, records)


class Detector:
    def __init__(self, h: Harness, node: str, condition_codes: frozenset[str] = frozenset()) -> None:
        self.clock = h.clock
        self.source = Lines(KernelLogInterpreter(CAT, GpuIndex({BUS: 3})))
        self.writer = ConditionWriter(h.kube, h.clock, WriterConfig(min_interval_s=0, qps=1000))
        self.events = EventRecorder(h.kube, h.clock, "autoclusters-detector", instance=node)
        self.agent = NodeAgent(node, [Scheduled(self.source)], catalog=CAT, names=NAMES, writer=self.writer,
                               events=self.events, clock=h.clock, window_s=WINDOW, condition_codes=condition_codes)

    def log(self, codes: Sequence[int], text: str = "an error") -> None:
        self.source.pending += [format_xid_line(BUS, code, text) for code in codes]
        self.tick(1)
        self.tick(WINDOW)  # past the persistence window

    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.agent.poll()
        self.writer.step()
        self.writer.wait_idle()
        self.events.flush()


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def gpu_condition(h: Harness, node: str) -> dict[str, str]:
    node_obj = h.node_obj(node) or {}
    return next(c for c in node_obj["status"]["conditions"] if c["type"] == NAMES.gpu_condition)


def test_the_application_buckets_hold_the_codes_nvidia_calls_application_errors() -> None:
    assert {8, 13, 31, 43, 45, 63, 68, 69, 92, 94, 137} <= set(APPLICATION_XIDS)
    assert not {48, 74, 79, 95, 119, 154} & set(APPLICATION_XIDS)


@pytest.mark.parametrize("fault_classes", [{}, {"gpu": "reset"}, {"gpu": "replace"}])
def test_no_application_or_software_xid_repairs_a_node_under_auto(h: Harness, fault_classes: dict[str, str]) -> None:
    h.pool(mode="auto", faultClasses=fault_classes)
    h.node("n1")
    h.start()
    detector = Detector(h, "n1")
    detector.log(APPLICATION_XIDS)
    assert gpu_condition(h, "n1")["status"] == "False"  # events at most, never the fault condition
    h.run(seconds=600, detector=False)
    assert h.records() == []
    assert h.events("MaintenanceRequired") == []


def test_an_application_xid_repairs_only_where_the_detector_raises_it_and_the_pool_names_it(h: Harness) -> None:
    h.pool("named", mode="auto", repairCodes={"gpu:13": "reset"})
    h.pool("unnamed", mode="auto", faultClasses={"gpu": "reset"})
    h.node("a", pool="named")
    h.node("b", pool="unnamed")
    h.start()
    for node in ("a", "b"):
        Detector(h, node, condition_codes=frozenset({"gpu:13"})).log([13])
        assert gpu_condition(h, node)["message"] == "GPU 3 reported Xid 13 (Graphics Engine Exception)."
    h.run(lambda: bool(h.records("a")), seconds=600, detector=False)
    assert [r["spec"]["action"] for r in h.records("a")] == ["reset"]
    h.run(lambda: bool(h.records("b")), seconds=600, detector=False)
    assert h.records("b") == []  # the class override never reaches an application error


def test_an_unknown_code_is_reported_with_an_event_and_a_metric_and_not_repaired(h: Harness) -> None:
    h.pool(mode="auto", faultClasses={"gpu": "reset"})
    h.node("n1")
    h.start()
    detector = Detector(h, "n1")
    detector.log([999])
    cond = gpu_condition(h, "n1")
    assert (cond["status"], cond["message"]) == ("True", "GPU 3 reported Xid 999 (not in the fault catalog).")
    [event] = h.events(EVENT_UNKNOWN_CODE)
    assert event["type"] == "Warning"
    assert "gpu code 999" in event["message"] and "gpu:999" in event["message"]
    text = render([detector.agent], detector.writer, h.clock.monotonic())
    assert 'autoclusters_detector_unknown_codes_total{class="gpu",code="999"} 1' in text.splitlines()
    h.run(seconds=600, detector=False)
    assert h.records() == []


def test_a_pool_that_names_an_unknown_code_repairs_it(h: Harness) -> None:
    h.pool(mode="auto", repairCodes={"gpu:999": "replace"})
    h.node("n1")
    h.start()
    Detector(h, "n1").log([999])
    h.run(lambda: bool(h.records()), seconds=600, detector=False)
    assert [r["spec"]["action"] for r in h.records()] == ["replace"]


@pytest.mark.parametrize("text, repaired", [
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", True),  # other wording, same number
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", False),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", False),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", True),  # wording of some drivers
])
def test_xid_154_repairs_by_the_action_the_driver_asks_for(h: Harness, text: str, repaired: bool) -> None:
    h.pool(mode="auto")
    h.node("n1")
    h.start()
    Detector(h, "n1").log([154], text)
    assert gpu_condition(h, "n1")["message"].startswith("GPU 3 reported Xid 154 (GPU recovery action: ")
    h.run(lambda: bool(h.records()), seconds=600, detector=False)
    assert [r["spec"]["action"] for r in h.records()] == (["reset"] if repaired else [])


def test_an_xid_154_beside_an_application_error_decides_the_repair(h: Harness) -> None:
    """NVIDIA's XID_154_EVAL: with Xid 154 seen, take its action; the Xid 13 alone repairs nothing."""
    h.pool(mode="auto")
    h.node("n1")
    h.start()
    detector = Detector(h, "n1")
    detector.source.pending.append(format_xid_line(BUS, 13, "Graphics SM Warp Exception"))
    detector.log([154], "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
    assert gpu_condition(h, "n1")["message"] == "GPU 3 reported Xid 154 (GPU recovery action: Node Reboot Required)."
    h.run(lambda: bool(h.records()), seconds=600, detector=False)
    assert [r["spec"]["action"] for r in h.records()] == ["reset"]


def test_an_unknown_gpu_code_does_not_hide_an_interconnect_fault_that_repairs(h: Harness) -> None:
    h.pool(mode="auto")
    h.node("n1")
    h.start()
    Detector(h, "n1").log([999])  # the GPU condition: True, not repaired
    now = utc_iso(h.clock.now())
    h.api.edit("/api/v1/nodes/n1", functools.partial(_set_condition, cond={
        "type": NAMES.interconnect_condition, "status": "True", "reason": "InterconnectError",
        "message": "HCA mlx5_0 port 1 reported port_down.", "lastHeartbeatTime": now, "lastTransitionTime": now}))
    h.run(lambda: bool(h.records()), seconds=600, detector=False)
    [record] = h.records()
    assert record["spec"]["action"] == "reset" and "port_down" in str(record["spec"])
