"""Escalation and failure (docs/contract.md): failed reset, refault, repeated fault, failed replacement."""

from __future__ import annotations

import time

import pytest

from autoclusters import names as n
from autoclusters.sim.provider import ANN_FAIL_REPLACE, ANN_FAIL_RESET
from tests.integration.controller_support import ROW_REMAP_FAILURE_MESSAGE, XID48_MESSAGE, Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def test_reset_fails_then_escalated_replace_under_the_same_approval(ctl: Env) -> None:
    pool, (node,) = ctl.pool("propose")
    ctl.kube.patch_node(node, {"metadata": {"annotations": {ANN_FAIL_RESET: "true"}}})
    ctl.raise_fault(node)
    ctl.record_in(node, "AwaitingApproval")
    ctl.approve(node)  # the only approval given
    done = ctl.record_in(node, "Succeeded", timeout=40)
    status = done["status"]
    assert status["escalated"] is True and status["action"] == "replace" and status["attempts"] == 2
    assert done["spec"]["action"] == "reset"
    new = status["replacementNode"]
    assert ctl.pool_nodes(pool) == [new] and ctl.find_node(node) is None
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)  # events trail the record (background sender, in order)
    reasons = ctl.reasons(node)
    assert reasons.count(n.EVENT_AWAITING_APPROVAL) == 1 and n.EVENT_ESCALATED in reasons
    assert len(ctl.records(node)) == 1


def test_fault_back_within_the_refault_window_replaces(ctl: Env) -> None:
    pool, (node,) = ctl.pool("propose")
    ctl.raise_fault(node)
    ctl.record_in(node, "AwaitingApproval")
    ctl.approve(node)
    first = ctl.record_in(node, "Succeeded", timeout=40)
    assert first["status"]["action"] == "reset"
    ctl.raise_fault(node)  # the same fault comes back minutes (here: a second) after the reset
    first_name = first["metadata"]["name"]
    done = wait_for("the second repair done", lambda: next(
        (r for r in ctl.records(node) if r["metadata"]["name"] != first_name
         and r.get("status", {}).get("phase") == "Succeeded"), None), timeout=40)
    assert len(ctl.records(node)) == 2
    assert done["status"]["action"] == "replace" and done["status"]["escalated"] is True
    assert done["status"]["escalatedFrom"] == first["metadata"]["name"]
    assert "AwaitingApproval" not in [s["phase"] for s in done["status"]["steps"]]  # one approval covers both
    assert ctl.pool_nodes(pool) == [done["status"]["replacementNode"]]


def test_same_kind_fault_within_24h_of_a_reset_replaces_directly(ctl: Env) -> None:
    pool, (node,) = ctl.pool("auto", escalation={"refaultWindowSeconds": 1, "resetMemorySeconds": 86400})
    ctl.raise_fault(node)
    first = ctl.record_in(node, "Succeeded", timeout=40)
    assert first["status"]["action"] == "reset"
    time.sleep(1.5)  # past the refault window: this is a new fault, not the old one back
    ctl.raise_fault(node, XID48_MESSAGE)
    first_name = first["metadata"]["name"]
    done = wait_for("the second repair done", lambda: next(
        (r for r in ctl.records(node) if r["metadata"]["name"] != first_name
         and r.get("status", {}).get("phase") == "Succeeded"), None), timeout=40)
    assert done["spec"]["fault"]["code"] == "48"
    assert done["status"]["action"] == "replace" and done["status"]["escalated"] is False
    assert "so it is replaced directly" in done["status"]["steps"][0]["message"]
    assert ctl.pool_nodes(pool) == [done["status"]["replacementNode"]]


def test_replacement_fails_then_action_failed_and_labels_stay(ctl: Env) -> None:
    pool, (node,) = ctl.pool("auto")
    ctl.kube.patch_node(node, {"metadata": {"annotations": {ANN_FAIL_REPLACE: "true"}}})
    ctl.raise_fault(node, ROW_REMAP_FAILURE_MESSAGE)
    failed = ctl.record_in(node, "Failed", timeout=40)
    assert failed["status"]["outcome"] == "Failed"
    ev = ctl.wait_reason(node, n.EVENT_FAILED)
    assert ev["type"] == "Warning"
    assert ctl.decided(node) == f"record {failed['metadata']['name']} Failed"  # looked at again: no retry
    assert ctl.labels(node).get(ctl.names.maintenance_required) == "true" and ctl.has_taint(node)
    cond = next(c for c in ctl.node(node)["status"]["conditions"] if c["type"] == ctl.names.gpu_condition)
    assert cond["status"] == "True"
    assert len(ctl.records(node)) == 1  # no retry loop
    assert ctl.pool_nodes(pool) == [node]
    # a human fixes the node: the fault clears, the record closes and the node returns to service
    ctl.clear_fault(node)
    closed = ctl.record_in(node, "Closed")
    assert closed["status"]["outcome"] == "Failed"
    wait_for("cleaned", lambda: not ctl.has_taint(node) and not ctl.node(node)["spec"].get("unschedulable"))
