"""No source is off in silence: each source's state is in the agent's log at start, its metrics and
its node's health condition, and a source the node's hardware implies that is unavailable (a GPU
node without NVML) turns the health condition True, which never reads as a GPU fault."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from autoclusters.clock import FakeClock
from autoclusters.detector import node as node_module
from autoclusters.detector.agent import NodeAgent, Scheduled
from autoclusters.detector.agent_config import AgentConfig
from autoclusters.detector.conditions import health_condition, parse_sources, sources_text
from autoclusters.detector.detector_metrics import render
from autoclusters.detector.infiniband import InfinibandSource
from autoclusters.detector.kernel_log import KernelLogInterpreter
from autoclusters.detector.kmsg import KernelLogFileSource
from autoclusters.detector.node import NodePaths, build_agent
from autoclusters.detector.nvml import NO_BINDINGS, NvmlSource
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import SourceState, SourceStatus
from autoclusters.detector.writer import ConditionWriter, WriterConfig
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names
from tests.unit.detector.node_conditions import NodeConditions

NAMES = Names()
CAT = load_catalog()
HEALTH = NAMES.detector_health_condition


def agent_with_nvml(tmp_path: Path, *, gpu_node: bool) -> tuple[NodeConditions, ConditionWriter, NodeAgent]:
    """An agent without NVML (no bindings: the real source's unavailable state; the search for the
    driver's library is tested through the real pynvml in test_nvml.py), on a node whose driver
    lists GPUs or not."""
    kube = NodeConditions(["n1"])
    clock = FakeClock()
    writer = ConditionWriter(kube.kube, clock, WriterConfig(min_interval_s=0, qps=1000))
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    sources = [Scheduled(KernelLogFileSource(str(kmsg), KernelLogInterpreter(CAT, GpuIndex.simulated()))),
               Scheduled(NvmlSource(None, CAT, expect_gpus=gpu_node)),
               Scheduled(InfinibandSource(CAT, clock, str(tmp_path / "no-infiniband")))]
    agent = NodeAgent("n1", sources, catalog=CAT, names=NAMES, writer=writer, events=None, clock=clock, window_s=60)
    agent.poll()
    writer.step()
    writer.wait_idle()
    return kube, writer, agent


def test_a_gpu_node_without_nvml_raises_the_warning_condition_which_is_no_gpu_fault(tmp_path: Path) -> None:
    kube, writer, _ = agent_with_nvml(tmp_path, gpu_node=True)
    health = kube.condition("n1", HEALTH)
    assert (health["status"], health["reason"]) == ("True", "ExpectedFaultSourceUnavailable")
    assert health["message"].startswith(f"Unavailable although this node's hardware implies it: nvml: {NO_BINDINGS}")
    assert parse_sources(health["message"])["nvml"] == SourceState(
        SourceStatus.UNAVAILABLE, NO_BINDINGS, expected=True)
    assert kube.condition("n1", NAMES.gpu_condition)["status"] == "False"
    assert HEALTH not in NAMES.fault_conditions
    assert CAT.fault_from_condition(health, NAMES) is None  # the controller sees no fault to repair
    writer.close()


def test_a_node_without_gpus_lacks_nvml_legitimately(tmp_path: Path) -> None:
    """Unavailable and not expected: the condition stays False and still says so."""
    kube, writer, _ = agent_with_nvml(tmp_path, gpu_node=False)
    health = kube.condition("n1", HEALTH)
    assert (health["status"], health["reason"]) == ("False", "AllFaultSourcesReadable")
    assert health["message"] == (
        f"Every fault source on this node is readable. Sources: infiniband unavailable (no {tmp_path}/no-infiniband: "
        f"no InfiniBand on this node); kmsg on; nvml unavailable ({NO_BINDINGS}).")
    writer.close()


def test_each_source_and_state_is_a_metric(tmp_path: Path) -> None:
    _, writer, agent = agent_with_nvml(tmp_path, gpu_node=True)
    text = render([agent], writer, 0.0)
    series = dict(re.findall(r'^autoclusters_detector_source_state\{source="([^"]+)",state="(\w+)"\} 1$', text, re.M))
    assert series == {"infiniband": "unavailable", "kmsg": "on", "nvml": "unavailable"}
    for source in series:  # every state exported, at 0 where the source is not in it
        assert len(re.findall(rf'^autoclusters_detector_source_state\{{source="{source}",', text, re.M)) == 3
    assert 'autoclusters_detector_expected_source_unavailable{source="nvml"} 1' in text
    assert 'autoclusters_detector_expected_source_unavailable{source="infiniband"} 0' in text
    writer.close()


def test_the_agent_logs_each_sources_state_once_at_start_and_again_when_it_changes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="autoclusters.detector.agent"):
        _, writer, agent = agent_with_nvml(tmp_path, gpu_node=True)
        agent.poll()
        (tmp_path / "no-infiniband").mkdir()  # an HCA's driver loaded
        agent.poll()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "source " in r.getMessage()]
    assert lines == [
        ("INFO", "n1: source kmsg is on"),
        ("WARNING", f"n1: source nvml is unavailable although the node's hardware implies it: {NO_BINDINGS}"),
        ("INFO", f"n1: source infiniband is unavailable: no {tmp_path}/no-infiniband: no InfiniBand on this node"),
        ("INFO", "n1: source infiniband is on"),
    ]
    writer.close()


def test_the_sources_list_reads_back_whatever_the_reasons_hold() -> None:
    states = {"dcgm": SourceState(SourceStatus.OFF, "no DCGM hostengine configured (--dcgm-host)"),
              "nvml": SourceState(SourceStatus.UNAVAILABLE, "NVML cannot start; (a; b) x", expected=True),
              "kmsg": SourceState(SourceStatus.ON)}
    text = sources_text(states)
    back = parse_sources("Every fault source on this node is readable." + text)
    assert back["dcgm"] == states["dcgm"] and back["kmsg"] == states["kmsg"]
    assert back["nvml"] == SourceState(SourceStatus.UNAVAILABLE, "NVML cannot start, (a, b) x", expected=True)
    assert parse_sources("Every fault source on this node is readable.") == {}  # an older detector's message


def test_a_long_error_keeps_the_sources_list_whole() -> None:
    states = {f"source{i}": SourceState(SourceStatus.OFF, "x" * 200) for i in range(3)}
    cond = health_condition({"dcgm": "e" * 2000}, NAMES, states=states)
    assert len(cond.message) <= 1000 and cond.reason == "FaultSourceUnreadable"
    assert set(parse_sources(cond.message)) == set(states)


def test_build_agent_lists_every_source_with_its_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU node (the driver lists a GPU) whose image lacks the NVML bindings: nvml unavailable
    and expected; the DCGM sources off until configured; InfiniBand unavailable where absent."""
    proc = tmp_path / "gpus"
    (proc / "0000:3b:00.0").mkdir(parents=True)
    monkeypatch.setattr(node_module, "load_library", lambda *_: (None, None))  # an image without the bindings
    kube = NodeConditions(["n1"])
    paths = NodePaths(kernel_log_file=str(tmp_path / "kern.log"), infiniband=str(tmp_path / "ib"),
                      nvidia_proc=str(proc))
    agent, writer, _ = build_agent("n1", kube.kube, FakeClock(), CAT, NAMES, AgentConfig(), paths)
    agent.poll()
    assert agent.states == {
        "file": SourceState(SourceStatus.ON, expected=True),  # kernel_log_file: the file source, named so
        "nvml": SourceState(SourceStatus.UNAVAILABLE, NO_BINDINGS, expected=True),
        "dcgm": SourceState(SourceStatus.OFF, "no DCGM hostengine configured (--dcgm-host)"),
        "dcgm-exporter": SourceState(SourceStatus.OFF, "no dcgm-exporter URL configured (--dcgm-exporter-url)"),
        "infiniband": SourceState(SourceStatus.UNAVAILABLE, f"no {tmp_path}/ib: no InfiniBand on this node"),
    }
    off, _, _ = build_agent("n1", kube.kube, FakeClock(), CAT, NAMES, AgentConfig(),
                            NodePaths(kernel_log_file=str(tmp_path / "kern.log"), use_nvml=False,
                                      dcgm_host="nvidia-dcgm.gpu-operator.svc:5555",
                                      dcgm_command=("no-such-dcgmi",)))
    off.poll()
    assert off.states["nvml"].status == SourceStatus.OFF
    assert off.states["dcgm"] == SourceState(SourceStatus.UNAVAILABLE, "no no-such-dcgmi in the image "
                                             "(see docs/detector.md)", expected=True)
    writer.close()
