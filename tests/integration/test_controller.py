"""The repair flow against the real control plane (docs/contract.md), durations shortened by flags."""

from __future__ import annotations

import pytest

from autoclusters import api
from autoclusters import names as n
from tests.integration.controller_support import ROW_REMAP_FAILURE_MESSAGE, Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def test_auto_reset_succeeds(ctl: Env) -> None:
    _, (node,) = ctl.pool("auto")
    boot = ctl.node(node)["status"]["nodeInfo"]["bootID"]
    ctl.raise_fault(node)
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["status"]["action"] == "reset" and done["spec"]["consentMode"] == "auto"
    assert done["spec"]["fault"] == {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                                     "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)."}
    phases = [s["phase"] for s in done["status"]["steps"]]
    assert phases == ["Scheduled", "Draining", "Acting", "Verifying", "Succeeded"]
    after = ctl.node(node)
    assert after["status"]["nodeInfo"]["bootID"] != boot
    wait_for("node cleaned", lambda: n.EVENT_SUCCEEDED in ctl.reasons(node))
    assert ctl.names.maintenance_required not in ctl.labels(node) and not ctl.has_taint(node)
    assert not ctl.node(node)["spec"].get("unschedulable")
    reasons = ctl.reasons(node)
    for reason in (n.EVENT_REQUIRED, n.EVENT_SCHEDULED, n.EVENT_STARTED, n.EVENT_SUCCEEDED):
        assert reason in reasons
    assert len(ctl.records(node)) == 1


def test_propose_waits_then_proceeds_on_approval(ctl: Env) -> None:
    _, (node,) = ctl.pool("propose")
    ctl.raise_fault(node)
    ctl.record_in(node, "AwaitingApproval")
    wait_for("marked", lambda: ctl.labels(node).get(ctl.names.maintenance_required) == "true" and ctl.has_taint(node))
    ctl.wait_reason(node, n.EVENT_AWAITING_APPROVAL)
    assert ctl.decided(node).endswith(" AwaitingApproval")  # looked at again, unapproved: still waits
    assert ctl.records(node)[-1]["status"]["phase"] == "AwaitingApproval"
    assert not ctl.node(node)["spec"].get("unschedulable")  # keeps running its work until approved
    ctl.approve(node)
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["status"]["approved"] is True
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)  # events trail the record (background sender, in order)
    assert n.EVENT_APPROVED in ctl.reasons(node)
    wait_for("labels gone", lambda: not ({ctl.names.maintenance_required, ctl.names.maintenance_approved}
                                         & set(ctl.labels(node))))


def test_off_does_nothing_but_the_condition(ctl: Env) -> None:
    _, (node,) = ctl.pool("off")
    ctl.raise_fault(node)
    assert ctl.decided(node) == "no open repair"  # a reconcile that read the fault
    assert ctl.records(node) == []
    assert ctl.names.maintenance_required not in ctl.labels(node) and not ctl.has_taint(node)
    assert ctl.reasons(node) == []


def test_fault_cleared_before_the_repair_starts(ctl: Env) -> None:
    _, (node,) = ctl.pool("propose")
    ctl.raise_fault(node)
    ctl.record_in(node, "AwaitingApproval")
    ctl.clear_fault(node)
    rec = ctl.record_in(node, "NotNeeded")
    assert rec["status"]["outcome"] == "NotNeeded"
    wait_for("cleaned", lambda: not ctl.has_taint(node) and ctl.names.maintenance_required not in ctl.labels(node))
    ctl.wait_reason(node, n.EVENT_FAULT_CLEARED)


def test_catalog_replace_fault_replaces_the_node(ctl: Env) -> None:
    pool, (node,) = ctl.pool("auto")
    ctl.raise_fault(node, ROW_REMAP_FAILURE_MESSAGE)
    done = ctl.record_in(node, "Succeeded", timeout=40)
    new = done["status"]["replacementNode"]
    assert done["status"]["action"] == "replace" and new and new != node
    assert ctl.find_node(node) is None
    assert ctl.pool_nodes(pool) == [new]
    assert ctl.labels(new)[ctl.names.pool_label] == pool


def test_a_pool_that_names_an_unknown_xid_in_repair_codes_repairs_it(ctl: Env) -> None:
    """An unknown code is never repaired by default; the pool's explicit repairCodes entry (accepted
    by the API server's schema and CEL rule) makes it a replacement."""
    pool, (node,) = ctl.pool("auto", repairCodes={"gpu:999": "replace"})
    assert ctl.get_pool(pool)["spec"]["repairCodes"] == {"gpu:999": "replace"}
    ctl.raise_fault(node, "GPU 3 reported Xid 999 (not in the fault catalog).")
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["status"]["action"] == "replace" and done["status"]["replacementNode"] not in ("", node)


@pytest.mark.parametrize(("spec", "expect"), [
    ({"consentMode": "sometimes"}, "consentMode"),
    ({"maxConcurrentRepairs": 0}, "maxConcurrentRepairs"),
    ({"faultClasses": {"gpu": "reboot"}}, "faultClasses.gpu"),
    ({"repairCodes": {"gpu:13": "reboot"}}, "repairCodes"),
    ({"repairCodes": {"gpu13": "reset"}}, "repairCodes keys are <class>:<code>"),
    ({"circuitBreaker": {"openAbovePercent": 20, "closeBelowPercent": 30}}, "closeBelowPercent must not exceed"),
    ({"provider": {"type": "cloud"}}, "provider.type"),
])
def test_the_api_server_rejects_a_bad_pool(ctl: Env, spec: dict, expect: str) -> None:
    from autoclusters.kube import Invalid

    body = {"apiVersion": f"{ctl.names.api_group}/{api.VERSION}", "kind": "GpuNodePool",
            "metadata": {"name": f"bad-{abs(hash(expect)) % 10000}"}, "spec": spec}
    with pytest.raises(Invalid) as err:
        ctl.kube.create(ctl.pool_path(), body)
    assert expect in str(err.value)


def test_pool_status_shows_nodes_faults_and_breaker(ctl: Env) -> None:
    pool, nodes = ctl.pool("propose", nodes=2)
    ctl.raise_fault(nodes[0])
    ctl.record_in(nodes[0], "AwaitingApproval")
    status = wait_for("pool status", lambda: (s := ctl.get_pool(pool).get("status", {})).get("faultyNodes") == 1
                      and s)
    assert status["nodes"] == 2 and status["faultyPercent"] == 50 and status["circuitBreaker"]["state"] == "Closed"
    ctl.clear_fault(nodes[0])
    wait_for("fault gone from the pool status", lambda: ctl.get_pool(pool)["status"]["faultyNodes"] == 0)
