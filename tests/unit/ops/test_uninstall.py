"""Removal: every mark of ours leaves the nodes and pods, a cordon is lifted only where autoclusters
cordoned, a node in mid-repair is decided by its phase, and nothing runs while a writer is there.

The repairs are the controller's own (the harness), stopped in the phase under test: the cleanup
then reads the records and nodes that controller left, as ``pulumi destroy`` does once the
controller's pods are gone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from autoclusters.clock import utc_iso
from autoclusters.names import DETECTOR_HEALTH_CONDITION, DRAIN_REASON_PREFIX, SLINKY_CORDON_REASON
from autoclusters.ops import uninstall as u
from autoclusters.providers.karpenter import DO_NOT_DISRUPT, DO_NOT_REPAIR, NODEPOOL_LABEL
from tests.unit.controller.harness import NAMES, NAMESPACE, ROW_REMAP_FAILURE, Harness
from tests.unit.fakeapi import Request

JSON = dict[str, Any]


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(sim_seconds=600)  # a reset or replacement stays under way until the test says
    yield harness
    harness.stop()


def _ours(node: JSON) -> list[str]:
    return u.marks_of(NAMES, node)


def _clean(h: Harness, **kw: Any) -> u.Report:
    return u.uninstall(h.kube, NAMES, NAMESPACE, clock=h.clock, sleep=lambda s: h.clock.advance(s), **kw)


def _to_phase(h: Harness, phase: str, *, mode: str = "auto", fault: str | None = None, **pool: Any) -> None:
    h.pool(mode=mode, **pool)
    h.node("n1")
    h.start()
    h.run()
    if fault:
        h.fault("n1", fault)
    else:
        h.fault("n1")
    h.run(lambda: h.phase("n1") == phase, seconds=120, detector=False)
    assert h.phase("n1") == phase


def test_every_mark_goes_and_what_is_not_ours_stays(h: Harness) -> None:
    h.node("n1", **{NODEPOOL_LABEL: "gpu", "team": "ml", NAMES.maintenance_required: "true",
                    NAMES.maintenance_approved: "true"})
    h.pod("n1", "train")
    ours = {NAMES.drain_deadline: "2026-01-01T00:00:00Z", NAMES.drain_reason: "Xid 79", NAMES.remediation: "n1-abc",
            NAMES.drain_ack("slurm"): "n1-abc", NAMES.marked_at_annotation: "2026-01-01T00:00:00Z",
            DO_NOT_DISRUPT: "true", NAMES.karpenter_guard_marker: DO_NOT_DISRUPT,
            SLINKY_CORDON_REASON: f"{DRAIN_REASON_PREFIX} Xid 79", NAMES.slurm_jobs: "{}",
            NAMES.slurm_external_drain: "x", NAMES.operation_annotation: "op-1",
            NAMES.redfish_reset_annotation: "op-2"}
    # a user's own Karpenter guard stays, and so does the operator's BMC address
    theirs = {DO_NOT_REPAIR: "true", "team.example/owner": "ml",
              NAMES.redfish_system_annotation: "https://10.0.0.9/redfish/v1/Systems/1"}

    def mark(node: JSON) -> None:
        node["metadata"].setdefault("annotations", {}).update({**ours, **theirs})
        node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                  {"key": NAMES.taint_key, "value": "true", "effect": "PreferNoSchedule"}]
        node["status"]["conditions"] += [
            {"type": NAMES.gpu_condition, "status": "True", "reason": "NvidiaXIDError", "message": "m"},
            {"type": NAMES.interconnect_condition, "status": "False", "reason": "x", "message": "m"},
            {"type": DETECTOR_HEALTH_CONDITION, "status": "False", "reason": "x", "message": "m"},
            {"type": "NetworkUnavailable", "status": "False", "reason": "x", "message": "m"}]

    h.api.edit("/api/v1/nodes/n1", mark)
    h.api.edit("/api/v1/namespaces/default/pods/train", lambda p: p["metadata"].setdefault("annotations", {}).update(
        {NAMES.drain_deadline: "t", NAMES.drain_reason: "r", NAMES.remediation: "n1-abc",
         NAMES.pod_drain_ack: "n1-abc", "keep": "me"}))
    before = h.node_obj("n1")
    assert before is not None and len(_ours(before)) == 2 + 1 + len(ours) + 3

    dry = _clean(h, dry_run=True)
    assert h.node_obj("n1") == before and dry.dry_run and dry.nodes[0].removed
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == []
    assert node["metadata"]["labels"]["team"] == "ml" and node["metadata"]["labels"][NODEPOOL_LABEL] == "gpu"
    assert {k: node["metadata"]["annotations"][k] for k in theirs} == theirs
    assert [t["key"] for t in node["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "NetworkUnavailable"]
    pod = h.api.read("/api/v1/namespaces/default/pods/train")
    assert pod is not None and pod["metadata"]["annotations"] == {"keep": "me"}
    assert report.left == [] and sorted(report.nodes[0].removed) == sorted(dry.nodes[0].removed)
    assert _clean(h).nodes == []  # a second run finds nothing


def test_an_admins_slinky_reason_and_an_operators_cordon_stay(h: Harness) -> None:
    h.node("n1")
    h.api.edit("/api/v1/nodes/n1", lambda n: (n["spec"].update(unschedulable=True), n["metadata"].setdefault(
        "annotations", {}).update({SLINKY_CORDON_REASON: "disk check", NAMES.drain_deadline: "t"})))
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][SLINKY_CORDON_REASON] == "disk check"
    assert report.nodes[0].removed == [f"annotation {NAMES.drain_deadline}"] and report.left == []


def test_the_slurm_bridges_cordon_is_lifted(h: Harness) -> None:
    h.node("n1")
    h.api.edit("/api/v1/nodes/n1", lambda n: (n["spec"].update(unschedulable=True), n["metadata"].setdefault(
        "annotations", {}).update({NAMES.slurm_cordoned: "true"})))
    _clean(h)
    node = h.node_obj("n1")
    assert node is not None and not node["spec"].get("unschedulable") and _ours(node) == []


def test_awaiting_approval_is_undone_and_an_operators_cordon_of_that_node_stays(h: Harness) -> None:
    _to_phase(h, "AwaitingApproval", mode="propose")
    h.api.edit("/api/v1/nodes/n1", lambda n: n["spec"].update(unschedulable=True))  # an operator's, not ours
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == [] and node["spec"]["unschedulable"] is True
    assert report.left == []


def test_draining_is_undone_with_the_cordon_autoclusters_put_and_the_pods_warning(h: Harness) -> None:
    h.pool(drain={"resetDeadlineSeconds": 300, "replaceDeadlineSeconds": 600})
    h.node("n1")
    h.pod("n1", "ckpt", **{NAMES.drain_wait_label: "true"})  # holds the drain: waits for its acknowledgement
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=10, detector=False)
    assert h.phase("n1") == "Draining"
    node = h.node_obj("n1")
    pod = h.api.read("/api/v1/namespaces/default/pods/ckpt")
    assert node is not None and node["spec"]["unschedulable"] is True and pod is not None
    assert NAMES.remediation in pod["metadata"]["annotations"]
    report = _clean(h)
    node = h.node_obj("n1")
    pod = h.api.read("/api/v1/namespaces/default/pods/ckpt")
    assert node is not None and _ours(node) == [] and not node["spec"].get("unschedulable")
    assert pod is not None and not set(pod["metadata"].get("annotations") or {}) & set(NAMES.warning_annotations)
    assert report.left == [] and any(r.startswith("cordon (Remediation ") for r in report.nodes[0].removed)


def test_draining_a_node_an_operator_had_cordoned_keeps_the_cordon(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.pod("n1", "ckpt", **{NAMES.drain_wait_label: "true"})
    h.api.edit("/api/v1/nodes/n1", lambda n: n["spec"].update(unschedulable=True))
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=10, detector=False)
    assert h.phase("n1") == "Draining" and h.records("n1")[0]["status"]["nodeWasCordoned"] is True
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == [] and node["spec"]["unschedulable"] is True and report.left == []


def test_a_reset_under_way_leaves_the_cordon_and_says_how_to_lift_it_then_a_later_run_lifts_it(h: Harness) -> None:
    _to_phase(h, "Acting")
    [record] = h.records("n1")
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == [] and node["spec"]["unschedulable"] is True
    [left] = report.left
    assert left.node == "n1" and left.what == "the cordon" and left.command.startswith("kubectl uncordon n1")
    assert record["metadata"]["name"] in left.why and "reset" in left.why
    assert left.line().startswith("LEFT node n1: the cordon: ")
    # the simulated host reboots (the reset ends without a controller): the next run lifts the cordon
    h.clock.advance(601)
    h.hosts.play()
    h.clock.advance(10)
    h.hosts.play()
    assert h.boot_id("n1") != "boot-n1-0"
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and not node["spec"].get("unschedulable") and report.left == []


def test_a_replacement_under_way_leaves_the_cordon(h: Harness) -> None:
    _to_phase(h, "Acting", fault=ROW_REMAP_FAILURE)
    assert h.records("n1")[0]["status"]["action"] == "replace"
    report = _clean(h)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == [] and node["spec"]["unschedulable"] is True
    [left] = report.left
    assert "replacement" in left.why and left.command == "kubectl uncordon n1 if the node is to stay"


@pytest.mark.parametrize("phase", ["Failed", "HumanNeeded"])
def test_a_holding_repair_leaves_the_cordon_of_a_node_whose_fault_is_unrepaired(phase: str) -> None:
    node = {"metadata": {"name": "n1", "labels": {NAMES.maintenance_required: "true"}},
            "spec": {"unschedulable": True}, "status": {}}
    record = {"metadata": {"name": "n1-abc"}, "spec": {"node": "n1"},
              "status": {"phase": phase, "attempts": 1, "nodeWasCordoned": False}}
    plan = u.plan_node(node, record, NAMES, NAMESPACE)
    assert f"label {NAMES.maintenance_required}" in plan.removed
    assert not any(op.get("path") == "/spec/unschedulable" for op in plan.ops)
    [left] = plan.left
    assert phase in left.why and left.command == "kubectl uncordon n1 once the node is repaired"


def test_a_closed_records_cordon_goes_only_with_its_marks() -> None:
    record = {"metadata": {"name": "n1-abc"}, "spec": {"node": "n1"},
              "status": {"phase": "Succeeded", "attempts": 1, "nodeWasCordoned": False}}
    unmarked = {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}, "status": {}}
    assert u.plan_node(unmarked, record, NAMES, NAMESPACE).ops == []  # cordoned since, by someone else
    marked = {"metadata": {"name": "n1", "labels": {NAMES.maintenance_required: "true"}},
              "spec": {"unschedulable": True}, "status": {}}
    assert "/spec/unschedulable" in [op["path"] for op in u.plan_node(marked, record, NAMES, NAMESPACE).ops]


def test_the_newest_record_decides() -> None:
    old = {"metadata": {"name": "a"}, "spec": {"node": "n1"}, "status": {"created": "2026-01-01T00:00:00Z"}}
    new = {"metadata": {"name": "b"}, "spec": {"node": "n1"}, "status": {"created": "2026-01-02T00:00:00Z"}}
    other = {"metadata": {"name": "c"}, "spec": {"node": "n2"}, "status": {"created": "2026-01-03T00:00:00Z"}}
    assert u.latest_record([new, old, other], "n1") is new and u.latest_record([other], "n1") is None


def test_a_concurrent_write_is_not_lost(h: Harness) -> None:
    """The patch tests what it removes: a label written between the read and the patch is kept."""
    h.node("n1", **{NAMES.maintenance_required: "true"})
    raced: list[int] = []

    def another_writer(req: Request) -> None:
        if not raced:
            raced.append(1)
            h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update({"late": "yes"}))

    h.api.on_request("PATCH", "/api/v1/nodes/n1", another_writer)
    _clean(h)
    node = h.node_obj("n1")
    assert raced and node is not None and node["metadata"]["labels"]["late"] == "yes" and _ours(node) == []


def test_it_refuses_while_a_writer_runs_and_waits_for_it_to_go(h: Harness) -> None:
    h.node("n1", **{NAMES.maintenance_required: "true"})
    h.api.put(f"/api/v1/namespaces/{NAMESPACE}/pods", {"metadata": {
        "name": "det-1", "labels": {"app.kubernetes.io/name": "autoclusters-detector"}}, "spec": {"nodeName": "n1"}})
    lease = {"metadata": {"name": "autoclusters-controller"},
             "spec": {"holderIdentity": "ctl-0", "leaseDurationSeconds": 15, "renewTime": utc_iso(h.clock.now())}}
    h.api.put(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", lease)
    h.api.put("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
              {"metadata": {"name": "autoclusters-maintenance-labels"}, "spec": {}})
    with pytest.raises(u.StillRunning) as e:
        _clean(h, wait_seconds=5)
    assert len(e.value.parts) == 3 and "autoclusters-detector" in e.value.parts[0]
    assert "Lease" in e.value.parts[1] and "ValidatingAdmissionPolicyBinding" in e.value.parts[2]
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == [f"label {NAMES.maintenance_required}"]  # nothing touched
    # the Lease expires (a controller killed, or run as a process and stopped); the rest goes with --stop
    h.api.put(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets", {"metadata": {
        "name": "autoclusters-detector", "labels": {"app.kubernetes.io/name": "autoclusters-detector"}}})
    h.api.remove(f"/api/v1/namespaces/{NAMESPACE}/pods/det-1")  # the DaemonSet's pod goes with it
    h.clock.advance(16)
    assert not u._lease_live(lease, h.clock.now()) and u._lease_live(lease, h.clock.now() - timedelta(seconds=10))
    _clean(h, stop=True, wait_seconds=5)
    node = h.node_obj("n1")
    assert node is not None and _ours(node) == []
    assert h.api.items(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets") == []
    assert h.api.items("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings") == []
