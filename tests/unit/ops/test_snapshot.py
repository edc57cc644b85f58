from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters.cli.status import render_sources
from autoclusters.detector.conditions import health_condition
from autoclusters.detector.source_records import SourceState, SourceStatus
from autoclusters.ops.snapshot import BREAKER_CLOSED, BREAKER_OPEN, BREAKER_UNKNOWN, breaker_state, build_snapshot
from tests.unit.builders import NAMES, node, pool, record, xid79

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def test_pools_count_nodes_faults_and_open_repairs_by_phase() -> None:
    nodes = [node("a-0", fault=xid79(), required=True), node("a-1"), node("a-2", fault=xid79(1), required=True,
                                                                          cordoned=True),
             node("b-0", "b")]
    records = [record("r1", "a-0", phase="AwaitingApproval"), record("r2", "a-2", phase="Acting"),
               record("old", "a-1", phase="Succeeded", outcome="Succeeded")]
    snap = build_snapshot(nodes, [pool("a", "propose", status={"circuitBreaker": {"state": "Closed"}}),
                                  pool("b")], records, NAMES, NOW)
    a, b = snap.pools
    assert (a.name, a.consent_mode, a.nodes, a.faulty, a.awaiting_approval, a.repairing, a.failed, a.breaker) == \
        ("a", "propose", 3, 2, 1, 1, 0, BREAKER_CLOSED)
    assert (b.name, b.consent_mode, b.nodes, b.faulty, b.repairing) == ("b", "auto", 1, 0, 0)
    assert [f.node for f in snap.faulty] == ["a-0", "a-2"]
    assert snap.faulty[0].phase == "AwaitingApproval" and snap.faulty[1].phase == "Acting"
    assert snap.faulty[1].cordoned and snap.faulty[0].tainted and snap.faulty[0].required
    assert snap.notes == []


def test_a_finished_record_is_not_the_nodes_open_repair() -> None:
    snap = build_snapshot([node("a-0", fault=xid79())], [pool("a")],
                          [record("done", "a-0", phase="Succeeded")], NAMES, NOW)
    assert snap.faulty[0].repair is None
    assert snap.faulty[0].phase == ""


def test_newest_open_record_wins() -> None:
    recs = [record("r-old", "a-0", phase="Failed", created="2026-01-01T00:00:00Z"),
            record("r-new", "a-0", phase="Draining", created="2026-01-01T00:05:00Z")]
    snap = build_snapshot([node("a-0", fault=xid79())], [pool("a")], recs, NAMES, NOW)
    assert snap.faulty[0].repair is not None and snap.faulty[0].repair.name == "r-new"


def test_without_crds_pools_come_from_labels_and_notes_say_what_is_missing() -> None:
    snap = build_snapshot([node("x-0", "x", fault=xid79()), node("x-1", "x"), node("plain", "")], None, None,
                          NAMES, NOW)
    (x,) = snap.pools
    assert (x.name, x.consent_mode, x.nodes, x.faulty, x.awaiting_approval, x.breaker, x.has_object) == \
        ("x", "", 2, 1, None, BREAKER_UNKNOWN, False)
    assert not snap.pools_installed and not snap.records_installed
    assert len(snap.notes) == 2
    assert "gpunodepools.remediation.autoclusters.io" in snap.notes[0]
    assert "remediations.remediation.autoclusters.io" in snap.notes[1]
    assert snap.to_dict()["crds"] == {"gpuNodePools": False, "remediations": False}


def test_age_counts_from_the_conditions_transition() -> None:
    snap = build_snapshot([node("a-0", fault=xid79(), since="2026-01-01T00:07:30Z")], [], [], NAMES, NOW)
    assert snap.faulty[0].age(NOW) == 150
    assert snap.to_dict()["faultyNodes"][0]["ageSeconds"] == 150


def test_label_only_nodes_and_interconnect_faults_are_listed() -> None:
    ib = (NAMES.interconnect_condition, "InterconnectError", "HCA mlx5_0 port 1 reported port_down.")
    snap = build_snapshot([node("a-0", required=True), node("a-1", fault=ib)], [pool("a")], [], NAMES, NOW)
    by = {f.node: f for f in snap.faulty}
    assert by["a-0"].condition == "" and by["a-0"].required
    assert by["a-1"].condition == NAMES.interconnect_condition and by["a-1"].reason == "InterconnectError"


def test_degraded_detector_is_not_a_fault() -> None:
    snap = build_snapshot([node("a-0", degraded=True)], [pool("a")], [], NAMES, NOW)
    assert snap.faulty == []
    assert snap.degraded_detectors == ["a-0"]


def test_pool_node_selector_wins_over_the_pool_label() -> None:
    sel = {"matchLabels": {"team": "llm"}}
    snap = build_snapshot([node("n-0", "other", labels={"team": "llm"})], [pool("llm", selector=sel)], [],
                          NAMES, NOW)
    assert {p.name: p.nodes for p in snap.pools} == {"llm": 1}


def test_breaker_state_as_the_controller_writes_it() -> None:
    assert breaker_state(pool("a", status={"circuitBreaker": {"state": "Open"}})) == BREAKER_OPEN
    assert breaker_state(pool("a", status={"circuitBreaker": {"state": "Closed"}})) == BREAKER_CLOSED
    assert breaker_state(pool("a", status={"nodes": 3})) == BREAKER_UNKNOWN  # no controller has written it
    assert breaker_state(pool("a")) == BREAKER_UNKNOWN


def _with_health(n: dict[str, Any], states: dict[str, SourceState]) -> dict[str, Any]:
    """The node with the health condition its detector writes for ``states`` (the real renderer)."""
    cond = health_condition({}, NAMES, states=states)
    n["status"]["conditions"].append({"type": cond.type, "status": cond.status, "reason": cond.reason,
                                      "message": cond.message})
    return n


def test_each_nodes_sources_as_its_detector_reports_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``autoclusters status`` reads every node's sources back from its health condition: the blind
    node (a GPU node without NVML) is degraded and says why; an older detector's message lists none."""
    on = SourceState(SourceStatus.ON)
    dcgm_off = SourceState(SourceStatus.OFF, "no DCGM hostengine configured (--dcgm-host)")
    blind = SourceState(SourceStatus.UNAVAILABLE, "NVML cannot start: NVML error 12", expected=True)
    nodes = [_with_health(node("a-0"), {"kmsg": on, "nvml": on, "dcgm": dcgm_off}),
             _with_health(node("a-1"), {"kmsg": on, "nvml": on, "dcgm": dcgm_off}),
             _with_health(node("b-0", "b"), {"kmsg": on, "nvml": blind, "dcgm": dcgm_off}),
             node("old")]
    snap = build_snapshot(nodes, [pool("a"), pool("b")], [], NAMES, NOW)
    assert snap.degraded_detectors == ["b-0"] and snap.faulty == []
    assert [(s.node, s.pool, s.sources["nvml"]) for s in snap.detector_sources] == [
        ("a-0", "a", on), ("a-1", "a", on), ("b-0", "b", blind)]
    assert snap.to_dict()["detectorSources"][2]["sources"]["nvml"] == {
        "state": "unavailable", "reason": "NVML cannot start: NVML error 12", "expected": True}
    render_sources(snap.detector_sources)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "DETECTOR SOURCES (3 nodes, as each node's detector reports them)"
    rows = [line.split() for line in out[2:4]]
    assert rows == [["kmsg", "nvml", "dcgm", "-", "a-0,", "a-1"],
                    ["kmsg", "dcgm", "nvml", "(expected)", "b-0"]]
    assert out[4:] == ["  dcgm off on a-0, a-1, b-0: no DCGM hostengine configured (--dcgm-host)",
                       "  nvml unavailable and expected on b-0: NVML cannot start: NVML error 12"]


def test_an_approval_without_maintenance_required_is_shown_as_stray_not_as_approved() -> None:
    """Admission refuses such a label and the controller removes it (MaintenanceApprovalRemoved); until
    then status must not read it as an approval of the node's repair."""
    from autoclusters.cli.status import _labels

    nodes = [node("a-0", fault=xid79(), required=True, approved=True), node("a-1", fault=xid79(), approved=True)]
    snap = build_snapshot(nodes, [pool("a", "propose")], [], NAMES, NOW)
    real, stray = snap.faulty
    assert (real.stray_approval, stray.stray_approval) == (False, True)
    assert _labels(real) == "required,approved,tainted"
    assert _labels(stray) == "stray-approval"
    as_json = stray.to_dict(NOW)
    assert as_json["labels"] == {"maintenanceRequired": False, "maintenanceApproved": True}  # the label as it is
    assert as_json["strayApproval"] is True and real.to_dict(NOW)["strayApproval"] is False
