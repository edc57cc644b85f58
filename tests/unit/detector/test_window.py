from autoclusters.detector.conditions import ConditionState, desired_conditions
from autoclusters.detector.source_records import Poll, Record
from autoclusters.detector.window import FaultTracker
from autoclusters.faults.catalog import FaultClass, Severity, load_catalog
from autoclusters.names import Names

NAMES = Names()
CAT = load_catalog()
XID79 = Record("kmsg", FaultClass.GPU, "79", "GPU 3", Severity.FATAL, "GPU has fallen off the bus")
PORT = Record("infiniband", FaultClass.INTERCONNECT, "port_down", "HCA mlx5_0 port 1", Severity.FATAL, "down")


def gpu(tracker: FaultTracker, now: float):
    return dict(desired_conditions(tracker, now, CAT, NAMES))[NAMES.gpu_condition]


def ic(tracker: FaultTracker, now: float):
    return dict(desired_conditions(tracker, now, CAT, NAMES))[NAMES.interconnect_condition]


def health_of(tracker: FaultTracker, now: float) -> ConditionState:
    state = dict(desired_conditions(tracker, now, CAT, NAMES))[NAMES.detector_health_condition]
    assert state is not None  # the agent's health condition is always written
    return state


def test_a_fault_turns_the_condition_true_only_after_the_window() -> None:
    t = FaultTracker(window_s=60)
    assert gpu(t, 0).status == "False"
    t.observe(Poll("kmsg", (XID79,)), now=100)
    assert gpu(t, 100) is None  # inside the window: keep what the node shows
    assert gpu(t, 159.9) is None
    assert gpu(t, 160).status == "True"
    assert gpu(t, 160).message == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."


def test_a_transient_that_recovers_inside_the_window_is_never_reported() -> None:
    t = FaultTracker(window_s=60)
    t.observe(Poll("infiniband", (PORT,), snapshot=True), now=0)
    t.observe(Poll("infiniband", (), snapshot=True), now=30)
    for now in (30, 60, 61, 1000):
        assert ic(t, now).status == "False"


def test_silence_from_a_log_source_does_not_clear() -> None:
    t = FaultTracker(window_s=1)
    t.observe(Poll("kmsg", (XID79,)), now=0)
    for now in range(1, 100):
        t.observe(Poll("kmsg", ()), now=now)
    assert gpu(t, 100).status == "True"


def test_reboot_clears_and_a_healthy_snapshot_clears() -> None:
    t = FaultTracker(window_s=1)
    t.observe(Poll("kmsg", (XID79,)), now=0)
    t.observe(Poll("infiniband", (PORT,), snapshot=True), now=0)
    assert gpu(t, 5).status == "True" and ic(t, 5).status == "True"
    t.reboot()
    assert gpu(t, 6).status == "False"
    t.observe(Poll("infiniband", (PORT,), snapshot=True), now=7)
    t.observe(Poll("infiniband", (), snapshot=True), now=9)
    assert ic(t, 9).status == "False"


def test_an_unreadable_source_neither_raises_nor_clears_a_fault() -> None:
    t = FaultTracker(window_s=1)
    t.observe(Poll("nvml", error="NVML init failed: Driver Not Loaded"), now=0)
    assert gpu(t, 100).status == "False"
    health = health_of(t, 100)
    assert health.status == "True" and "nvml: NVML init failed" in health.message
    t.observe(Poll("infiniband", (PORT,), snapshot=True), now=100)
    t.observe(Poll("infiniband", error="cannot read"), now=150)
    assert ic(t, 200).status == "True"  # the failing read did not count as "healthy"
    t.observe(Poll("nvml", snapshot=True), now=201)
    t.observe(Poll("infiniband", (PORT,), snapshot=True), now=201)
    health = health_of(t, 201)
    assert health.status == "False"


def test_warnings_are_returned_for_events_and_never_tracked() -> None:
    t = FaultTracker(window_s=0)
    warn = Record("kmsg", FaultClass.GPU, "13", "GPU 0", Severity.WARNING, "Graphics Engine Exception")
    assert t.observe(Poll("kmsg", (warn,)), now=0) == [warn]
    assert gpu(t, 10).status == "False"


def test_the_heaviest_repair_is_named_first() -> None:
    t = FaultTracker(window_s=0)
    reset = Record("kmsg", FaultClass.GPU, "79", "GPU 3", Severity.FATAL, "GPU has fallen off the bus")
    replace = Record("dcgm", FaultClass.DCGM, "DCGM_FR_ROW_REMAP_FAILURE", "GPU 1", Severity.FATAL,
                     "Row remapping failure")
    t.observe(Poll("kmsg", (reset,)), now=0)
    t.observe(Poll("kmsg", (replace,)), now=1)
    assert gpu(t, 2).message == "GPU 1 reported DCGM_FR_ROW_REMAP_FAILURE."
