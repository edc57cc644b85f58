"""The simulated fleet's bookkeeping: new nodes get agents, a new boot id is a reboot, gone nodes go."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from autoclusters.clock import FakeClock
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.detector_metrics import render
from autoclusters.detector.writer import WriterConfig
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names
from autoclusters.sim.fleet import SimulatedFleet
from autoclusters.sim.hardware import SimulatedHardware
from tests.unit import builders
from tests.unit.detector.node_conditions import NodeConditions

NAMES = Names()


def node(name: str, boot: str) -> dict[str, Any]:
    return builders.node(name, pool="", detected=False, boot_id=boot)


def seen(f: SimulatedFleet, name: str, boot: str) -> None:
    """The node as the informer's watch reports it (added or modified)."""
    f.nodes._apply({"type": "MODIFIED", "object": node(name, boot)})


def deleted(f: SimulatedFleet, name: str) -> None:
    f.nodes._apply({"type": "DELETED", "object": node(name, "")})


def fleet(tmp_path: Path) -> tuple[NodeConditions, FakeClock, SimulatedFleet]:
    kube = NodeConditions(["a", "b"])
    clock = FakeClock()
    f = SimulatedFleet(kube.kube, clock, load_catalog(), NAMES, tmp_path, "x=y",
                       AgentConfig(window_s=5, writer=WriterConfig(min_interval_s=0, qps=1000)))
    return kube, clock, f


def cycle(f: SimulatedFleet, clock: FakeClock, seconds: float = 1) -> None:
    clock.advance(seconds)
    f.poll_once()
    f.writer.step()
    f.writer.wait_idle()


def gpu(kube: NodeConditions, name: str) -> str:
    return kube.condition(name, NAMES.gpu_condition)["status"]


def test_a_new_boot_id_drops_the_faults_and_a_gone_node_is_dropped(tmp_path: Path) -> None:
    kube, clock, f = fleet(tmp_path)
    seen(f, "a", "boot-1")
    seen(f, "b", "boot-1")
    cycle(f, clock)
    assert sorted(f.agents) == ["a", "b"] and gpu(kube, "a") == "False"
    SimulatedHardware(tmp_path, "a").inject({"kind": "xid", "code": 79, "gpu": 0}, load_catalog())
    cycle(f, clock)
    cycle(f, clock, 5)
    assert gpu(kube, "a") == "True" and gpu(kube, "b") == "False"
    seen(f, "a", "boot-1")  # an update that is not a reboot
    cycle(f, clock)
    assert gpu(kube, "a") == "True"
    seen(f, "a", "boot-2")
    cycle(f, clock)
    assert gpu(kube, "a") == "False"
    assert SimulatedHardware(tmp_path, "a").kmsg.read_text() == ""  # the new boot's log starts empty
    deleted(f, "b")
    cycle(f, clock)
    assert sorted(f.agents) == ["a"]
    f.writer.close()


def test_one_broken_node_does_not_stop_the_others(tmp_path: Path) -> None:
    kube, clock, f = fleet(tmp_path)
    (tmp_path / "b").write_text("a file where the node's directory should be")
    seen(f, "a", "1")
    seen(f, "b", "1")
    cycle(f, clock)
    assert list(f.agents) == ["a"] and gpu(kube, "a") == "False"
    assert f.poll_errors == 1  # counted, and tried again at the next round
    cycle(f, clock)
    assert f.poll_errors == 2 and list(f.agents) == ["a"]
    f.writer.close()


def test_a_node_whose_poll_keeps_failing_logs_its_traceback_once_then_one_line(tmp_path: Path, caplog) -> None:
    """As the detector's NodeLoop: the first failure with its traceback, the same error again in
    one line each round (the simulator polls every node each second), and after a good poll in
    full again."""
    _, clock, f = fleet(tmp_path)
    broken = tmp_path / "b"
    broken.write_text("a file where the node's directory should be")
    seen(f, "a", "1")
    seen(f, "b", "1")
    for _ in range(3):
        cycle(f, clock)
    failed = [r for r in caplog.records if "simulated node b" in r.getMessage()]
    assert [(r.levelname, r.exc_info is not None) for r in failed] == [
        ("ERROR", True), ("WARNING", False), ("WARNING", False)]
    assert f.poll_errors == 3
    broken.unlink()  # b polls fine once: its next failure is logged in full again
    cycle(f, clock)
    assert "b" in f.agents
    caplog.clear()
    f.agents.pop("b")
    shutil.rmtree(broken)
    broken.write_text("a file again")
    cycle(f, clock)
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records
            if "simulated node b" in r.getMessage()] == [("ERROR", True)]
    f.writer.close()


def test_the_metrics_count_a_node_the_handler_or_the_poll_failed_on(tmp_path: Path, caplog) -> None:
    """What ``detector run --simulate --metrics-port`` serves: the informer's handler errors
    (the name every process with informers exports) and the failed polls, each logged with the node."""
    _, clock, f = fleet(tmp_path)
    handler = f.nodes._handler

    def buggy(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if name == "poison":  # a handler bug on one node stands in
            raise ValueError("cannot take this node")
        handler(name, old, new)

    f.nodes._handler = buggy
    (tmp_path / "b").write_text("a file where the node's directory should be")
    for name in ("a", "poison", "b"):
        seen(f, name, "1")
    cycle(f, clock)
    text = render(f.agent_list(), f.writer, clock.monotonic(), informers=(f.nodes,), poll_errors=f.poll_errors)
    assert 'autoclusters_informer_handler_errors_total{informer="simulated-nodes"} 1' in text
    assert "autoclusters_detector_poll_errors_total 1" in text  # b's poll; the poison node is polled fine
    parsed = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}  # valid text
    assert parsed["autoclusters_informer_handler_errors_total"] == 1
    assert parsed["autoclusters_detector_poll_errors_total"] == 1
    assert any("poison" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert any("node b failed" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert "autoclusters_informer_handler_errors_total" not in render(f.agent_list(), f.writer, clock.monotonic())
    f.writer.close()


def test_the_informer_keeps_only_name_version_and_boot_id(tmp_path: Path) -> None:
    _, _, f = fleet(tmp_path)
    big = {"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "y"}},
           "status": {"nodeInfo": {"bootID": "b1", "kernelVersion": "6"}, "conditions": [{"type": "Ready"}]}}
    f.nodes._apply({"type": "ADDED", "object": big})
    assert f.nodes.get("a") == {"metadata": {"name": "a", "resourceVersion": "7"},
                                "status": {"nodeInfo": {"bootID": "b1"}}}
    f.writer.close()


def test_a_poll_that_raises_is_reported_on_its_node_as_on_a_real_node(tmp_path: Path) -> None:
    """An agent whose poll raises (here its catalog, failing when the conditions rank a confirmed
    fault) is counted and its node's health condition names the error, as ``NodeLoop`` reports it
    on a real node; the other node is polled as before, and a poll that gets through clears it."""
    kube, clock, f = fleet(tmp_path)
    catalog = load_catalog()

    class RankingBug:
        def __getattr__(self, name: str) -> object:
            return getattr(catalog, name)

        def action_of(self, *args: object) -> object:
            raise KeyError("action")

    for name in ("a", "b"):
        seen(f, name, "1")
    cycle(f, clock)
    f.agents["a"].catalog = RankingBug()  # type: ignore[assignment]
    SimulatedHardware(tmp_path, "a").inject({"kind": "xid", "code": 79, "gpu": 3}, catalog)
    cycle(f, clock)
    cycle(f, clock, 6)  # past the window: ranking the fault raises
    health = kube.condition("a", NAMES.detector_health_condition)
    assert (health["status"], health["reason"], health["message"]) == (
        "True", "DetectorPollFailed",
        "The detector's poll failed: KeyError: 'action' Sources: dcgm on; infiniband on; kmsg on.")
    assert f.poll_errors == 1 and gpu(kube, "b") == "False"
    assert kube.condition("b", NAMES.detector_health_condition)["status"] == "False"
    f.agents["a"].catalog = catalog
    cycle(f, clock)
    assert kube.condition("a", NAMES.detector_health_condition)["status"] == "False" and gpu(kube, "a") == "True"
    f.writer.close()
