import threading
from typing import Any

from autoclusters import names as n
from autoclusters.clock import FakeClock
from autoclusters.detector.conditions import ConditionState
from autoclusters.detector.writer import ConditionWriter, WriterConfig
from tests.unit.detector.node_conditions import NodeConditions

T = "AutoClustersGPUFault"
TRUE = ConditionState(T, "True", "NvidiaXIDError", "GPU 3 reported Xid 79 (GPU has fallen off the bus).")
FALSE = ConditionState(T, "False", "NoGpuFaultDetected", "No GPU fault.")


def make(nodes: list[str], **cfg: Any) -> tuple[NodeConditions, FakeClock, ConditionWriter]:
    kube = NodeConditions(nodes)
    clock = FakeClock()
    config = WriterConfig(**{"heartbeat_s": 60, "min_interval_s": 1, "backoff_initial_s": 1, "backoff_max_s": 8,
                             "qps": 1000, **cfg})
    return kube, clock, ConditionWriter(kube.kube, clock, config)


def step(w: ConditionWriter) -> list[str]:
    started = w.step()
    w.wait_idle()
    return started


def test_changes_are_coalesced_and_only_own_types_are_patched() -> None:
    kube, _clock, w = make(["a"])
    w.set("a", T, FALSE)
    w.set("a", T, TRUE)
    w.set("a", n.DETECTOR_HEALTH_CONDITION, ConditionState(n.DETECTOR_HEALTH_CONDITION, "False", "x", "y"))
    assert step(w) == ["a"]
    assert len(kube.patches) == 1
    types = [c["type"] for c in kube.patches[0][1]["status"]["conditions"]]
    assert types == sorted([n.DETECTOR_HEALTH_CONDITION, T])
    assert kube.condition("a", "Ready")["reason"] == "KubeletReady"
    assert kube.condition("a", T)["status"] == "True"
    assert step(w) == []  # nothing changed, heartbeat not due
    w.close()


def test_heartbeat_rewrites_and_keeps_the_transition_time() -> None:
    kube, clock, w = make(["a"])
    w.set("a", T, TRUE)
    step(w)
    first = kube.condition("a", T)
    clock.advance(61)
    assert step(w) == ["a"]
    again = kube.condition("a", T)
    assert again["lastHeartbeatTime"] > first["lastHeartbeatTime"]
    assert again["lastTransitionTime"] == first["lastTransitionTime"]
    clock.advance(5)
    w.set("a", T, FALSE)
    step(w)
    assert kube.condition("a", T)["lastTransitionTime"] > first["lastTransitionTime"]
    w.close()


def test_a_restart_keeps_the_transition_time_written_before() -> None:
    kube, clock, w = make(["a"])
    w.set("a", T, TRUE)
    step(w)
    stamp = kube.condition("a", T)["lastTransitionTime"]
    clock.advance(600)
    kube2, w2 = kube, ConditionWriter(kube.kube, clock, WriterConfig(qps=1000))
    w2.set("a", T, TRUE)
    step(w2)
    assert kube2.condition("a", T)["lastTransitionTime"] == stamp
    w.close()
    w2.close()


def test_failures_back_off_per_node_and_resync_before_retrying() -> None:
    kube, clock, w = make(["bad", "good"])
    kube.fail.add("bad")
    w.set("bad", T, TRUE)
    w.set("good", T, TRUE)
    assert sorted(step(w)) == ["bad", "good"]
    assert kube.condition("good", T)["status"] == "True"
    assert w.status("bad")["failures"] == 1
    assert step(w) == []  # backing off
    clock.advance(1)
    assert step(w) == ["bad"]
    clock.advance(1)
    assert step(w) == []  # second failure: 2 s
    clock.advance(1)
    kube.fail.clear()
    gets = kube.gets.count("bad")
    assert step(w) == ["bad"]
    assert kube.gets.count("bad") == gets + 1  # resynced the node before writing again
    assert kube.condition("bad", T)["status"] == "True"
    assert w.status("bad")["failures"] == 0
    w.close()


def test_a_hanging_node_does_not_delay_the_others() -> None:
    kube, _clock, w = make(["slow", "fast"], workers=2)
    release = threading.Event()
    kube.hang["slow"] = release
    w.set("slow", T, TRUE)
    w.set("fast", T, TRUE)
    w.step()
    for _ in range(100):
        if kube.find_condition("fast", T):
            break
        threading.Event().wait(0.02)
    assert kube.condition("fast", T)["status"] == "True"
    assert kube.find_condition("slow", T) is None
    release.set()
    w.wait_idle()
    assert kube.condition("slow", T)["status"] == "True"
    w.close()


def test_a_deleted_node_is_forgotten() -> None:
    _kube, _clock, w = make(["a"])
    w.set("gone", T, TRUE)
    step(w)
    assert w.status("gone") == {}
    w.close()


def test_rate_limit_spreads_writes() -> None:
    _kube, clock, w = make([f"n{i}" for i in range(10)], qps=3)
    for i in range(10):
        w.set(f"n{i}", T, TRUE)
    assert len(step(w)) == 3
    clock.advance(1)
    assert len(step(w)) == 3
    w.close()


def test_what_is_pending_while_the_api_server_is_away_does_not_grow() -> None:
    """An API server away for a long time (every write fails), a fault that flaps the whole
    while on many nodes: the writer holds one desired state per node and condition type and at
    most one write in flight per node, however many changes and failed tries there were; once
    the server is back, the latest state is written, once, per node."""
    names = [f"n{i}" for i in range(5)]
    kube, clock, w = make(names, backoff_max_s=2)
    kube.fail.update(names)
    other = n.DETECTOR_HEALTH_CONDITION
    for i in range(2000):
        node = names[i % len(names)]
        w.set(node, T, TRUE if i % 2 else FALSE)
        w.set(node, other, ConditionState(other, "False", "Healthy", f"round {i}"))
        step(w)
        held_nodes, held_states, in_flight = w.pending()
        assert held_nodes <= len(names) and held_states <= 2 * len(names) and in_flight <= len(names)
        clock.advance(0.5)
    for node in names:  # the fault persists
        w.set(node, T, TRUE)
    assert w.pending() == (len(names), 2 * len(names), 0)
    assert kube.patches == [] and w.failures > 100
    kube.fail.clear()
    clock.advance(2)  # the backoff's cap
    step(w)
    assert sorted(name for name, _ in kube.patches) == names  # one write each, of the latest states
    for name in names:
        assert kube.condition(name, T)["status"] == "True"
    w.close()
