"""Drain rules and safety limits: PDBs, the drain deadline, the opt-out label,
maxConcurrentRepairs, the circuit breaker and the attempt budget."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial

import pytest

from autoclusters import names as n
from autoclusters.kube import NotFound
from tests.integration.controller_support import ROW_REMAP_FAILURE_MESSAGE, Env
from tests.integration.helpers import parse_time, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture()
def ns(ctl: Env) -> Iterator[str]:
    with ctl.workload_namespace("work") as name:
        yield name


def make_pod(ctl: Env, ns: str, node: str, name: str, labels: dict[str, str] | None = None) -> None:
    ctl.kube.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "registry.example/trainer:1"}]}})
    wait_for(f"pod {name} running", lambda: ctl.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
             .get("status", {}).get("phase") == "Running", timeout=30)


def make_pdb(ctl: Env, ns: str, app: str, min_available: int) -> None:
    """minAvailable works for bare pods (maxUnavailable needs a controller's scale)."""
    ctl.kube.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}})
    wait_for("PDB observed", lambda: ctl.kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{app}")
             .get("status", {}).get("currentHealthy") == 1, timeout=30)


def pod_exists(ctl: Env, ns: str, name: str) -> bool:
    try:
        ctl.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return True
    except NotFound:
        return False


def held_by(ctl: Env, node: str, hold: str) -> bool:
    """Whether the node's latest record is held for ``hold``."""
    records = ctl.records(node)
    return bool(records) and (records[-1].get("status") or {}).get("hold") == hold


def test_a_pdb_holds_the_drain_until_it_allows(ctl: Env, ns: str) -> None:
    _, (node,) = ctl.pool("auto", drain={"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 120})
    make_pod(ctl, ns, node, "trainer")
    make_pdb(ctl, ns, "trainer", 1)
    ctl.raise_fault(node)
    ctl.record_in(node, "Draining")
    assert ctl.decided(node).endswith(" Draining")  # a later reconcile, its eviction refused again
    assert ctl.records(node)[-1]["status"]["phase"] == "Draining"
    assert pod_exists(ctl, ns, "trainer")  # the eviction got 429 and is retried, not forced
    assert ctl.node(node)["spec"].get("unschedulable") is True
    started = time.monotonic()
    ctl.kube.patch(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/trainer", {"spec": {"minAvailable": 0}})
    ctl.record_in(node, "Succeeded", timeout=40)
    assert time.monotonic() - started < 60  # well before the 120 s deadline: evicted, not deleted
    assert not pod_exists(ctl, ns, "trainer")


def test_a_stuck_pod_is_deleted_at_the_deadline(ctl: Env, ns: str) -> None:
    _, (node,) = ctl.pool("auto", drain={"resetDeadlineSeconds": 4, "replaceDeadlineSeconds": 4})
    make_pod(ctl, ns, node, "stuck")
    make_pdb(ctl, ns, "stuck", 1)  # never allows an eviction
    ctl.raise_fault(node)
    draining = ctl.record_in(node, "Draining")
    done = ctl.record_in(node, "Succeeded", timeout=40)
    steps = {s["phase"]: s["time"] for s in done["status"]["steps"]}

    waited = (parse_time(steps["Acting"]) - parse_time(draining["status"]["drainStarted"])).total_seconds()
    assert waited >= 4
    assert not pod_exists(ctl, ns, "stuck")


def test_an_opt_out_pod_blocks_automatic_replacement(ctl: Env, ns: str) -> None:
    pool, (node,) = ctl.pool("auto")
    make_pod(ctl, ns, node, "precious", {"app": "precious", ctl.names.auto_replacement_label: "disabled"})
    ctl.raise_fault(node, ROW_REMAP_FAILURE_MESSAGE)
    ev = ctl.wait_reason(node, n.EVENT_BLOCKED)
    assert "opt-out" in ev["message"]
    assert ctl.decided(node).endswith(" Scheduled")  # looked at again with the pod there: still held
    rec = ctl.records(node)[-1]
    assert rec["status"]["phase"] == "Scheduled" and rec["status"]["hold"] == "OptOutPod"
    assert ctl.find_node(node) is not None and pod_exists(ctl, ns, "precious")
    ctl.kube.delete(f"/api/v1/namespaces/{ns}/pods/precious", {"gracePeriodSeconds": 0})
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["status"]["action"] == "replace" and ctl.pool_nodes(pool) == [done["status"]["replacementNode"]]


def test_max_concurrent_repairs_holds(ctl: Env) -> None:
    pool, nodes = ctl.pool("auto", nodes=3, maxConcurrentRepairs=1,
                           circuitBreaker={"openAbovePercent": 100, "closeBelowPercent": 100},
                           provider={"type": "simulated", "simulated": {"resetSeconds": 2}})
    for node in nodes:
        ctl.raise_fault(node)
    peak = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        recs = ctl.records(pool=pool)
        phases = [r.get("status", {}).get("phase") for r in recs]
        peak = max(peak, sum(p in ("Draining", "Acting", "Verifying") for p in phases))
        if len(recs) == 3 and all(p == "Succeeded" for p in phases):
            break
        time.sleep(0.1)
    assert [r["status"]["phase"] for r in ctl.records(pool=pool)] == ["Succeeded"] * 3
    assert peak == 1
    for node in nodes:  # events trail the records (background sender, in order per node)
        ctl.wait_reason(node, n.EVENT_SUCCEEDED)
    held = [r for node in nodes for r in ctl.events(node) if r["reason"] == n.EVENT_BLOCKED]
    assert held and all("maxConcurrentRepairs 1" in e["message"] for e in held)


def test_the_breaker_opens_and_closes_by_itself(ctl: Env) -> None:
    pool, nodes = ctl.pool("off", nodes=5, circuitBreaker={"openAbovePercent": 30, "closeBelowPercent": 25},
                           maxConcurrentRepairs=5)
    a, b = nodes[:2]
    ctl.raise_fault(a)
    ctl.raise_fault(b)
    wait_for("breaker open", lambda: ctl.get_pool(pool).get("status", {}).get("circuitBreaker", {})
             .get("state") == "Open")
    ev = ctl.wait_reason(pool, n.EVENT_BREAKER_OPEN, kind="GpuNodePool")
    assert "2 of 5" in ev["message"] and ev["type"] == "Warning"
    ctl.patch_pool(pool, {"consentMode": "auto"})
    for node in (a, b):
        wait_for(f"{node} held", partial(held_by, ctl, node, "CircuitBreakerOpen"))
    for node in (a, b):  # looked at again with the breaker open: still held
        assert ctl.decided(node).endswith(" Scheduled")
    assert all(ctl.records(x)[-1]["status"]["phase"] == "Scheduled" for x in (a, b))
    ctl.clear_fault(a)  # the fleet-wide cause goes away on one node: 1 of 5 = 20% < 25%
    wait_for("breaker closed", lambda: ctl.get_pool(pool)["status"]["circuitBreaker"]["state"] == "Closed")
    ctl.wait_reason(pool, n.EVENT_BREAKER_CLOSED, kind="GpuNodePool")
    ctl.record_in(b, "Succeeded", timeout=40)
    assert ctl.records(a)[-1]["status"]["phase"] == "NotNeeded"


def test_the_attempt_budget_stops_a_loop(ctl: Env) -> None:
    _, (node,) = ctl.pool("auto", attemptBudget={"maxRepairs": 1, "windowSeconds": 3600},
                          escalation={"refaultWindowSeconds": 1, "resetMemorySeconds": 1})
    ctl.raise_fault(node)
    first = ctl.record_in(node, "Succeeded", timeout=40)
    time.sleep(1.5)
    ctl.raise_fault(node)
    held = wait_for("budget record", lambda: next(
        (r for r in ctl.records(node) if r["metadata"]["name"] != first["metadata"]["name"]
         and r.get("status", {}).get("phase") == "HumanNeeded"), None))
    assert held["status"]["outcome"] == "AttemptBudgetExhausted" and held["status"]["attempts"] == 0
    ctl.wait_reason(node, n.EVENT_BUDGET_EXHAUSTED)
    assert ctl.decided(node) == f"record {held['metadata']['name']} HumanNeeded"  # looked at again: no repair
    assert ctl.labels(node).get(ctl.names.maintenance_required) == "true"
    assert not ctl.node(node)["spec"].get("unschedulable")  # no repair started: the node is not drained
    assert len(ctl.records(node)) == 2
