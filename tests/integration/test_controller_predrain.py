"""The warning before the drain, against the real control plane: annotations and events on the
node and its pods, an acknowledgement ending the wait early, the deadline holding when nobody
acknowledges, a restart in the middle of the wait, Slinky's slurmd pods, and the cleanup."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from autoclusters import names as n
from autoclusters.kube import Forbidden, NotFound
from tests.integration.controller_support import Env
from tests.integration.helpers import parse_time, wait_for

pytestmark = pytest.mark.integration

LONG_DRAIN = {"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 120}


@pytest.fixture()
def ns(ctl: Env) -> Iterator[str]:
    with ctl.workload_namespace("warn") as name:
        yield name
        ctl.ensure_one_controller()


def make_pod(ctl: Env, ns: str, node: str, name: str, labels: dict[str, str] | None = None) -> None:
    ctl.kube.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name, **(labels or {})}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "registry.example/trainer:1"}]}})
    wait_for(f"pod {name} running", lambda: ctl.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
             .get("status", {}).get("phase") == "Running", timeout=30)


def pod(ctl: Env, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return ctl.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except NotFound:
        return None


def annotations_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def pod_annotation(ctl: Env, ns: str, name: str, key: str) -> str | None:
    return annotations_of(pod(ctl, ns, name)).get(key)


def pod_events(ctl: Env, ns: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
    """The pod's events (with ``reason`` only those)."""
    events = ctl.kube.list_items(f"/api/v1/namespaces/{ns}/events",
                                 field_selector=f"involvedObject.name={name},involvedObject.kind=Pod")
    return [e for e in events if reason is None or e["reason"] == reason]


def wait_warned(ctl: Env, node: str) -> dict[str, Any]:
    """The record once it is Draining and the node carries its warning."""
    rec = ctl.record_in(node, "Draining")
    wait_for("node warned", lambda: annotations_of(ctl.node(node)).get(ctl.names.remediation)
             == rec["metadata"]["name"])
    return rec


def assert_warning_gone(ctl: Env, node: str) -> None:
    keys = set(ctl.names.warning_annotations)
    wait_for("warning removed", lambda: not any(k in keys or k.startswith(ctl.names.drain_ack_prefix)
                                                or k == n.SLINKY_CORDON_REASON
                                                for k in annotations_of(ctl.node(node))))


def test_an_acknowledgement_ends_the_wait_early(ctl: Env, ns: str, tmp_path: Path) -> None:
    calls = tmp_path / "hook-calls.jsonl"
    hook = ctl.listed_script(f"import sys; open({str(calls)!r}, 'a').write(sys.stdin.read() + '\\n')")
    _, (node,) = ctl.pool("auto", drain=LONG_DRAIN, preDrain={
        "waitSeconds": 90, "acknowledgers": ["slurm"], "hook": {"command": hook}})
    make_pod(ctl, ns, node, "trainer", {ctl.names.drain_wait_label: "true"})
    make_pod(ctl, ns, node, "web")  # did not ask to be waited for: warned, not waited for
    ctl.raise_fault(node)
    rec = wait_warned(ctl, node)
    record = rec["metadata"]["name"]
    node_ann = annotations_of(ctl.node(node))
    deadline = parse_time(node_ann[ctl.names.drain_deadline])
    assert deadline == parse_time(rec["status"]["preDrainDeadline"])
    assert 85 <= (deadline - parse_time(rec["status"]["drainStarted"])).total_seconds() <= 90
    assert node_ann[ctl.names.drain_reason] == (f"GPU 3 reported Xid 79 (GPU has fallen off the bus) "
                                                f"(remediation {record})")
    assert n.SLINKY_CORDON_REASON not in node_ann  # the pool did not ask for it
    for name in ("trainer", "web"):  # each pod: the same three annotations and an event
        wait_for(f"{name} warned", partial(pod_annotation, ctl, ns, name, ctl.names.remediation))
        ann = annotations_of(pod(ctl, ns, name))
        assert {k: ann[k] for k in ctl.names.warning_annotations} == {k: node_ann[k] for k in
                                                                      ctl.names.warning_annotations}
        ev = wait_for(f"event on {name}", partial(pod_events, ctl, ns, name, n.EVENT_DRAIN_WARNING))
        assert node_ann[ctl.names.drain_deadline] in ev[0]["message"] and ev[0]["type"] == "Warning"
    got = json.loads(wait_for("hook called", lambda: calls.read_text().strip() if calls.exists() else None))
    assert got["record"] == record and got["node"] == node and got["deadline"] == node_ann[ctl.names.drain_deadline]
    # the node-level acknowledger acks, then a stale ack on the pod: still waiting, nothing evicted
    ctl.kube.patch_node(node, {"metadata": {"annotations": {ctl.names.drain_ack("slurm"): record}}})
    trainer_path = f"/api/v1/namespaces/{ns}/pods/trainer"
    ctl.kube.patch(trainer_path, {"metadata": {"annotations": {ctl.names.pod_drain_ack: "some-older-record"}}})
    assert ctl.decided(node).endswith(" Draining")  # a reconcile that read both acks: still waiting
    assert ctl.records(node)[-1]["status"]["phase"] == "Draining"
    assert "evictionStarted" not in ctl.records(node)[-1]["status"]
    assert pod(ctl, ns, "trainer") is not None and pod(ctl, ns, "web") is not None
    # the workload saved its checkpoint and acks for this record: the drain goes on at once
    acked_at = time.monotonic()
    ctl.kube.patch(trainer_path, {"metadata": {"annotations": {ctl.names.pod_drain_ack: record}}})
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert time.monotonic() - acked_at < 30  # far from the 90 s wait
    started = parse_time(done["status"]["evictionStarted"])
    assert started < deadline
    assert any("arrived (slurm, pod " in s["message"] for s in done["status"]["steps"])
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)  # events trail the record (background sender, in order)
    assert n.EVENT_DRAIN_WAIT_ENDED in ctl.reasons(node)
    assert pod(ctl, ns, "trainer") is None and pod(ctl, ns, "web") is None
    assert_warning_gone(ctl, node)
    assert len(calls.read_text().strip().splitlines()) == 1  # the hook was called once


def test_the_deadline_holds_when_nobody_acknowledges(ctl: Env, ns: str) -> None:
    _, (node,) = ctl.pool("auto", drain=LONG_DRAIN, preDrain={"waitSeconds": 4, "acknowledgers": ["slurm"]})
    make_pod(ctl, ns, node, "trainer", {ctl.names.drain_wait_label: "true"})
    ctl.raise_fault(node)
    rec = wait_warned(ctl, node)
    done = ctl.record_in(node, "Succeeded", timeout=40)
    waited = (parse_time(done["status"]["evictionStarted"]) - parse_time(rec["status"]["drainStarted"])).total_seconds()
    assert 4 <= waited < 10
    ended = ctl.wait_reason(node, n.EVENT_DRAIN_WAIT_ENDED)
    assert "without an acknowledgement from slurm, pod " in ended["message"]
    assert pod(ctl, ns, "trainer") is None
    assert_warning_gone(ctl, node)
    # a late acknowledgement after the repair, on a node an admin has cordoned since: the ack
    # is removed, the admin's cordon stays
    ctl.kube.patch_node(node, {"spec": {"unschedulable": True},
                               "metadata": {"annotations": {ctl.names.drain_ack("slurm"): rec["metadata"]["name"]}}})
    assert_warning_gone(ctl, node)  # the sign: the reconcile that read the cordon with the ack removed only the ack
    assert ctl.node(node)["spec"].get("unschedulable") is True


def test_a_restart_during_the_wait_neither_warns_again_nor_moves_the_deadline(ctl: Env, ns: str,
                                                                              tmp_path: Path) -> None:
    calls = tmp_path / "hook-calls.jsonl"
    hook = ctl.listed_script(f"import sys; open({str(calls)!r}, 'a').write(sys.stdin.read() + '\\n')")
    _, (node,) = ctl.pool("auto", drain=LONG_DRAIN, preDrain={
        "waitSeconds": 60, "acknowledgers": ["slurm"], "hook": {"command": hook}})
    make_pod(ctl, ns, node, "trainer", {ctl.names.drain_wait_label: "true"})
    ctl.raise_fault(node)
    rec = wait_warned(ctl, node)
    wait_for("pod warned", lambda: [e for e in pod_events(ctl, ns, "trainer") if e["reason"] == n.EVENT_DRAIN_WARNING])
    wait_for("hook called", lambda: calls.read_text().strip() if calls.exists() else None)
    for c in ctl.running():
        c.kill()
    fresh = ctl.start_controller()
    ctl.wait_leader([fresh], timeout=30)
    assert ctl.decided(node) == f"record {rec['metadata']['name']} Draining"  # the new leader's look at it
    again = ctl.records(node)[-1]
    assert again["status"]["phase"] == "Draining" and "evictionStarted" not in again["status"]
    assert again["status"]["preDrainDeadline"] == rec["status"]["preDrainDeadline"]
    record = rec["metadata"]["name"]
    ctl.kube.patch_node(node, {"metadata": {"annotations": {ctl.names.drain_ack("slurm"): record}}})
    ctl.kube.patch(f"/api/v1/namespaces/{ns}/pods/trainer",
                   {"metadata": {"annotations": {ctl.names.pod_drain_ack: record}}})
    ctl.record_in(node, "Succeeded", timeout=40)
    warnings = [e for e in pod_events(ctl, ns, "trainer") if e["reason"] == n.EVENT_DRAIN_WARNING]
    assert len(warnings) == 1 and not warnings[0].get("series")  # warned once, across the restart
    assert len(calls.read_text().strip().splitlines()) == 1
    assert_warning_gone(ctl, node)


REFUSE_MARKING = "test.autoclusters.io/refuse-marking"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _refuse_marking(ctl: Env, node: str) -> tuple[str, str]:
    """An admission policy that refuses every write giving ``node`` the maintenance label while
    the node carries ``REFUSE_MARKING``: the controller's patch that starts a repair is refused
    by the API server as an outage or an admission webhook would refuse it. Returns the paths
    of the policy and its binding."""
    name = f"refuse-marking-{node}"[:63]
    label = ctl.names.maintenance_required
    ctl.kube.create(f"{ADMISSION}/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["UPDATE"], "resources": ["nodes"]}]},
                 "matchConditions": [{"name": "this-node", "expression": f"object.metadata.name == '{node}'"}],
                 "validations": [{"expression": f"!(has(object.metadata.annotations) && '{REFUSE_MARKING}' in "
                                                f"object.metadata.annotations && has(object.metadata.labels) && "
                                                f"'{label}' in object.metadata.labels)",
                                  "message": "marking refused by the test", "reason": "Forbidden"}]}})
    ctl.kube.create(f"{ADMISSION}/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}})
    return f"{ADMISSION}/validatingadmissionpolicies/{name}", f"{ADMISSION}/validatingadmissionpolicybindings/{name}"


def _marking_refused(ctl: Env, node: str) -> bool:
    """A dry-run marking (admission runs, nothing is stored) is refused."""
    try:
        ctl.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {ctl.names.maintenance_required: "true"}}},
                       dryRun="All")
    except Forbidden:
        return True
    return False


def test_a_refused_first_marking_is_written_again_with_the_hook_called_once(ctl: Env, ns: str,
                                                                             tmp_path: Path) -> None:
    """The patch that marks, cordons and warns the node as the repair starts is refused. The
    record goes on (Draining, evicting: nobody to wait for) but nothing is evicted and the hook
    is not called while the node cannot be marked; once the API server takes the patch, the
    node gets the whole marking, the pod its warning, the hook its one call, then the drain."""
    calls = tmp_path / "hook-calls.jsonl"
    hook = ctl.listed_script(f"import sys; open({str(calls)!r}, 'a').write(sys.stdin.read() + '\\n')")
    _, (node,) = ctl.pool("auto", drain=LONG_DRAIN, preDrain={"waitSeconds": 60, "hook": {"command": hook}})
    make_pod(ctl, ns, node, "trainer")
    ctl.kube.patch_node(node, {"metadata": {"annotations": {REFUSE_MARKING: "true"}}})
    paths = _refuse_marking(ctl, node)
    try:
        # the policy takes a moment to reach the API server's admission plugin
        wait_for("the marking refused", lambda: _marking_refused(ctl, node), timeout=30)
        ctl.raise_fault(node)
        record = ctl.record_in(node, "Draining", "Acting", "Verifying", "Succeeded")["metadata"]["name"]
        ctl.wait_reason(node, n.EVENT_DRAIN_WARNING)  # the step's events go out with the refused write
        # written again after the backoff (a reconcile that read the node as it is now), refused again
        assert ctl.decided(node) == f"failed (Forbidden): record {record} Draining"
        rec = ctl.records(node)[-1]
        assert rec["status"]["phase"] == "Draining" and "evictionStarted" in rec["status"]  # nothing evicted
        node_obj = ctl.node(node)
        assert ctl.names.maintenance_required not in node_obj["metadata"].get("labels", {})
        assert not node_obj["spec"].get("unschedulable") and not calls.exists()
        assert pod(ctl, ns, "trainer") is not None and not pod_events(ctl, ns, "trainer", n.EVENT_DRAIN_WARNING)
        ctl.kube.patch_node(node, {"metadata": {"annotations": {REFUSE_MARKING: None}}})
        wait_warned(ctl, node)
        marked = ctl.node(node)
        assert marked["metadata"]["labels"][ctl.names.maintenance_required] == "true"
        assert marked["spec"]["unschedulable"] is True
        assert any(t["key"] == ctl.names.taint_key for t in marked["spec"].get("taints") or [])
        ann = annotations_of(marked)
        assert ann[ctl.names.drain_deadline] == rec["status"]["preDrainDeadline"] and ann[ctl.names.drain_reason]
        ctl.record_in(node, "Succeeded", timeout=60)
        got = [json.loads(line) for line in calls.read_text().strip().splitlines()]
        assert len(got) == 1 and got[0]["record"] == record
        assert len(pod_events(ctl, ns, "trainer", n.EVENT_DRAIN_WARNING)) == 1 and pod(ctl, ns, "trainer") is None
        assert_warning_gone(ctl, node)
    finally:
        for path in paths[::-1]:
            with contextlib.suppress(NotFound):
                ctl.kube.delete(path)


def _slurm_state(ctl: Env, ns: str, name: str, **states: bool) -> None:
    conds = [{"type": f"{n.SLINKY_STATE_PREFIX}{s}", "status": "True" if v else "False"} for s, v in states.items()]
    ctl.kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"conditions": conds}},
                   "application/strategic-merge-patch+json")


def test_slinky_cordon_reason_and_a_busy_slurmd_pod_held_until_slurm_drained_it(ctl: Env, ns: str) -> None:
    _, (node,) = ctl.pool("auto", drain=LONG_DRAIN, preDrain={"waitSeconds": 30, "slinky": True})
    ctl.kube.patch_node(node, {"metadata": {"annotations": {"other.example/keep": "yes"}}})
    make_pod(ctl, ns, node, "slurmd")
    _slurm_state(ctl, ns, "slurmd", Allocated=True)  # slurm-operator's mirror: a job runs there
    ctl.raise_fault(node)
    rec = wait_warned(ctl, node)
    reason = annotations_of(ctl.node(node))[n.SLINKY_CORDON_REASON]
    assert reason == f"{n.DRAIN_REASON_PREFIX} GPU 3 reported Xid 79 (GPU has fallen off the bus) " \
                     f"(remediation {rec['metadata']['name']})"
    wait_for("evicting", lambda: "evictionStarted" in ctl.records(node)[-1]["status"])  # nobody to wait for
    assert ctl.decided(node).endswith(" Draining")  # looked at again with the job running: slurmd stays
    assert pod(ctl, ns, "slurmd") is not None and ctl.records(node)[-1]["status"]["phase"] == "Draining"
    _slurm_state(ctl, ns, "slurmd", Allocated=True, Drain=True)  # DRAINING: still busy
    assert ctl.decided(node).endswith(" Draining")  # a reconcile that read the DRAINING state
    assert pod(ctl, ns, "slurmd") is not None
    _slurm_state(ctl, ns, "slurmd", Allocated=False, Idle=True, Drain=True)  # DRAINED
    ctl.record_in(node, "Succeeded", timeout=40)
    assert pod(ctl, ns, "slurmd") is None
    assert_warning_gone(ctl, node)
    assert annotations_of(ctl.node(node)).get("other.example/keep") == "yes"
