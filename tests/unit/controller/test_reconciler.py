"""The reconciler and actuator against the fake API server: whole repairs, races, leftovers,
the circuit breaker; seconds, no control plane."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters import api
from autoclusters.controller import remediation_record as rec
from autoclusters.names import (
    EVENT_BLOCKED,
    EVENT_BREAKER_CLOSED,
    EVENT_BREAKER_OPEN,
    EVENT_DRAIN_WARNING,
    EVENT_REQUIRED,
    EVENT_SCHEDULED,
    EVENT_STARTED,
    EVENT_SUCCEEDED,
)
from tests.unit.controller.harness import NAMES, Harness
from tests.unit.fakeapi import ApiError, Request


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def _marked(node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return NAMES.maintenance_required in labels or any(t["key"] == NAMES.taint_key for t in taints)


def test_an_auto_reset_runs_from_fault_to_a_clean_node(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.node("n2")
    h.start()
    h.run()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"
    [record] = h.records("n1")
    phases = [s["phase"] for s in record["status"]["steps"]]
    assert phases == ["Scheduled", "Draining", "Acting", "Verifying", "Succeeded"]
    node = h.node_obj("n1")
    assert node is not None and not _marked(node) and not node["spec"].get("unschedulable")
    assert not any(k.startswith(NAMES.domain + "/drain") for k in node["metadata"].get("annotations") or {})
    assert h.boot_id("n1") != "boot-n1-0"
    assert [e["reason"] for e in h.events()] == [EVENT_REQUIRED, EVENT_SCHEDULED, EVENT_STARTED,
                                                 EVENT_DRAIN_WARNING, EVENT_SUCCEEDED]
    assert h.records("n2") == []


def test_a_marking_removed_while_verifying_is_put_back_before_the_node_takes_work(h: Harness) -> None:
    """The node came back from its reset but is not verified yet (its fault still reported):
    someone uncordons it and removes the maintenance label and taint. The next Verifying look
    marks and cordons it again; the success unmarks it as usual. A Verifying look on a node that
    carries the marking writes nothing to it."""
    h.pool()
    h.node("n1")
    h.detector_delay = 30.0  # the detector clears the fault 30 s after the new boot
    h.start()
    h.run()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Verifying" and h.boot_id("n1") != "boot-n1-0")
    assert h.phase("n1") == "Verifying"
    node = h.node_obj("n1")
    assert node is not None and _marked(node) and node["spec"].get("unschedulable") is True
    writes: list[Request] = []
    h.api.before.append(lambda req: writes.append(req) if req.verb == "PATCH" and req.path == "/api/v1/nodes/n1"
                        else None)
    h.run(seconds=5, detector=False)  # looks while the fault is still reported: nothing to write
    assert h.phase("n1") == "Verifying" and writes == []

    def unmark_by_hand(n: dict) -> None:
        n["metadata"]["labels"].pop(NAMES.maintenance_required)
        n["spec"]["taints"] = [t for t in n["spec"]["taints"] if t["key"] != NAMES.taint_key]
        n["spec"].pop("unschedulable")

    h.api.edit("/api/v1/nodes/n1", unmark_by_hand)
    h.run(lambda: len(writes) > 0, seconds=5, detector=False)
    node = h.node_obj("n1")
    assert h.phase("n1") == "Verifying" and len(writes) == 1
    assert node is not None and _marked(node) and node["spec"].get("unschedulable") is True
    assert NAMES.maintenance_required in node["metadata"]["labels"]
    assert any(t["key"] == NAMES.taint_key for t in node["spec"]["taints"])
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=120)
    node = h.node_obj("n1")
    assert h.phase("n1") == "Succeeded" and node is not None and not _marked(node)
    assert not node["spec"].get("unschedulable")


def test_two_nodes_racing_for_the_last_repair_slot_start_one_repair(h: Harness) -> None:
    h.pool(maxConcurrentRepairs=1, circuitBreaker={"openAbovePercent": 90, "closeBelowPercent": 80})
    for n in ("n1", "n2", "n3"):
        h.node(n)
    h.start()
    h.run()
    h.fault("n1")
    h.fault("n2")
    h.api.settle()
    # both reconciles list their pods (before the pool's lock) before either decides
    barrier = threading.Barrier(2, timeout=5)
    listed: list[str] = []

    def both_listed(req: Request) -> None:
        if req.verb == "LIST" and req.resource == "pods" and len(listed) < 2:
            listed.append(req.query["fieldSelector"])
            barrier.wait()

    h.api.before.append(both_listed)
    threads = [threading.Thread(target=h.reconciler.reconcile, args=(n,)) for n in ("n1", "n2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    h.api.before.clear()
    assert sorted(listed) == ["spec.nodeName=n1", "spec.nodeName=n2"]
    started = [n for n in ("n1", "n2") if h.phase(n) in ("Draining", "Acting", "Verifying")]
    held = [n for n in ("n1", "n2") if h.phase(n) == "Scheduled"]
    assert len(started) == 1 and len(held) == 1
    [waiting] = h.records(held[0])
    assert waiting["status"]["hold"] == "MaxConcurrentRepairs"
    assert [e["reason"] for e in h.events(EVENT_BLOCKED)] == [EVENT_BLOCKED]
    held_node = h.node_obj(held[0])
    assert held_node is not None and _marked(held_node) and not held_node["spec"].get("unschedulable")
    # the slot frees when the first repair ends; the second then runs
    h.run(lambda: h.phase(held[0]) == "Succeeded", seconds=300)
    assert h.phase(started[0]) == "Succeeded" and h.phase(held[0]) == "Succeeded"


def test_a_conflict_on_persist_acts_on_nothing_and_the_next_look_goes_on(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    h.api.settle()
    lost: list[str] = []

    def someone_else_writes_first(req: Request) -> None:
        if req.verb == "PATCH" and req.resource == "remediations/status" and not lost:
            lost.append(req.path)
            h.api.edit(req.path.removesuffix("/status"), lambda r: r["metadata"].setdefault("labels", {}).update(
                {"touched": "yes"}))

    h.api.before.append(someone_else_writes_first)
    h.api.requests.clear()
    assert h.reconciler.reconcile("n1") == 0.2
    assert lost
    assert not any(r.resource == "nodes" and r.verb == "PATCH" for r in h.api.requests)  # nothing acted
    node = h.node_obj("n1")
    assert node is not None and not _marked(node)
    h.api.before.clear()
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"
    assert len(h.records("n1")) == 1


def test_leftover_marks_without_an_active_record_are_removed(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.node("n2")
    h.start()
    h.run()
    # a repair that ended (record Succeeded) and a crash before the node was cleaned
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.api.edit("/api/v1/nodes/n1", lambda n: (
        n["metadata"]["labels"].update({NAMES.maintenance_required: "true"}),
        n["spec"].update({"unschedulable": True,
                          "taints": [{"key": NAMES.taint_key, "value": "true", "effect": "PreferNoSchedule"}]})))
    # and a late acknowledgement left on another node, its cordon not ours
    h.api.edit("/api/v1/nodes/n2", lambda n: (
        n["metadata"].setdefault("annotations", {}).update({NAMES.drain_ack_prefix + "slurm": "old"}),
        n["spec"].update({"unschedulable": True})))
    h.run()
    n1, n2 = h.node_obj("n1"), h.node_obj("n2")
    assert n1 is not None and not _marked(n1) and not n1["spec"].get("unschedulable")
    assert n2 is not None and n2["spec"].get("unschedulable") is True
    assert not any(k.startswith(NAMES.drain_ack_prefix) for k in n2["metadata"].get("annotations") or {})


def test_the_circuit_breaker_opens_and_closes_with_events_on_the_pool(h: Harness) -> None:
    h.pool(circuitBreaker={"openAbovePercent": 50, "closeBelowPercent": 40, "minNodes": 2})
    for n in ("n1", "n2", "n3"):
        h.node(n)
    h.start()
    h.run()
    h.fault("n1")
    h.fault("n2")
    h.run(seconds=5)
    pool = h.api.read(h.pool_path("p"))
    assert pool is not None and pool["status"]["circuitBreaker"]["state"] == "Open"
    assert [e["involvedObject"]["kind"] for e in h.events(EVENT_BREAKER_OPEN)] == ["GpuNodePool"]
    assert {r["status"]["hold"] for r in h.records()} == {"CircuitBreakerOpen"}
    assert all(rec.phase_of(r).value == "Scheduled" for r in h.records())  # type: ignore[union-attr]
    h.clear_fault("n2")
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=120)
    assert [e["reason"] for e in h.events(EVENT_BREAKER_CLOSED)] == [EVENT_BREAKER_CLOSED]
    assert h.phase("n1") == "Succeeded" and h.phase("n2") == "NotNeeded"


def test_a_write_that_fails_leaves_the_key_for_a_retry(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    h.api.settle()

    def outage(req: Request) -> None:
        if req.verb == "POST" and req.resource == "remediations":
            raise ApiError(503, "etcd is down")

    h.api.before.append(outage)
    with pytest.raises(Exception, match="etcd is down"):
        h.reconciler.reconcile("n1")
    h.api.before.clear()
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"


def test_pods_are_warned_evicted_and_what_a_budget_blocks_is_deleted_at_the_deadline(h: Harness) -> None:
    h.pool(drain={"resetDeadlineSeconds": 30, "replaceDeadlineSeconds": 60})
    h.node("n1")
    h.pod("n1", "train-0")
    h.pod("n1", "train-1")
    h.api.put("/api/v1/namespaces/kube-system/pods", {"metadata": {
        "name": "agent", "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "controller": True}]},
        "spec": {"nodeName": "n1"}})
    h.api.pdb_blocked.add("default/train-1")
    h.start()
    h.run()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Draining", seconds=1)
    [record] = h.records("n1")
    blocked = h.api.read("/api/v1/namespaces/default/pods/train-1")
    assert blocked is not None and blocked["metadata"]["annotations"][NAMES.remediation] == record["metadata"]["name"]
    writes = [(r.verb, r.path.rsplit("/", 2)[-2:]) for r in h.api.requests if r.resource.startswith("pods")
              and r.verb in ("PATCH", "POST")]
    assert writes.index(("PATCH", ["pods", "train-0"])) < writes.index(("POST", ["train-0", "eviction"]))
    assert sorted(e["involvedObject"]["name"] for e in h.events(EVENT_DRAIN_WARNING)) == ["n1", "train-0", "train-1"]
    assert h.api.read("/api/v1/namespaces/default/pods/train-0") is None
    assert h.api.read("/api/v1/namespaces/default/pods/train-1") is not None  # the budget says not now
    assert h.phase("n1") == "Draining"
    h.run(lambda: h.phase("n1") == "Acting", seconds=60)
    assert h.clock.monotonic() >= 1000 + 30  # not before the deadline
    assert h.api.read("/api/v1/namespaces/default/pods/train-1") is None
    assert h.api.read("/api/v1/namespaces/kube-system/pods/agent") is not None  # DaemonSet pods stay
    assert ("DELETE", "pods") in h.api.counts() and ("POST", "pods/eviction") in h.api.counts()
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"


def test_a_pod_that_asked_to_be_waited_for_holds_eviction_until_it_acknowledges(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.pod("n1", "ckpt", **{NAMES.drain_wait_label: "true"})
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=10)
    assert h.phase("n1") == "Draining"
    assert h.api.read("/api/v1/namespaces/default/pods/ckpt") is not None
    [record] = h.records("n1")
    assert "pod default/ckpt" in record["status"]["message"]
    h.api.edit("/api/v1/namespaces/default/pods/ckpt", lambda p: p["metadata"]["annotations"].update(
        {NAMES.pod_drain_ack: record["metadata"]["name"]}))
    h.run(lambda: h.phase("n1") == "Acting", seconds=10)
    assert [e["reason"] for e in h.events("MaintenanceDrainWaitEnded")] == ["MaintenanceDrainWaitEnded"]
    assert h.api.read("/api/v1/namespaces/default/pods/ckpt") is None


def test_propose_waits_for_the_approval_label(h: Harness) -> None:
    h.pool(mode="propose")
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=30)
    assert h.phase("n1") == "AwaitingApproval"
    node = h.node_obj("n1")
    assert node is not None and _marked(node) and not node["spec"].get("unschedulable")
    h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update({NAMES.maintenance_approved: "true"}))
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"
    node = h.node_obj("n1")
    assert node is not None and NAMES.maintenance_approved not in node["metadata"]["labels"]


def test_a_failed_reset_escalates_to_a_replacement_that_joins_the_pool(h: Harness) -> None:
    h.pool()
    h.node("n1")
    h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update(
        {"sim.autoclusters.io/fail-reset": "true"}))
    h.start()
    h.run()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=120)
    [record] = h.records("n1")
    assert record["status"]["action"] == "replace" and record["status"]["escalated"] is True
    new = record["status"]["replacementNode"]
    assert new and h.node_obj(new) is not None and h.node_obj("n1") is None
    assert [e["reason"] for e in h.events("MaintenanceActionFailed")] == ["MaintenanceActionFailed"]
    assert [e["reason"] for e in h.events("MaintenanceEscalated")] == ["MaintenanceEscalated"]
    h.run(seconds=10)
    pool = h.api.read(h.pool_path("p"))
    assert pool is not None and (pool["status"]["nodes"], pool["status"]["faultyNodes"]) == (1, 0)
    assert h.fleet.members("p") == {new}


def test_a_pool_without_a_provider_holds_and_an_invalid_pool_says_why_on_itself(h: Harness) -> None:
    h.pool("bare", provider=None)
    h.node("n1", pool="bare")
    h.api.put(h.pool_path(), {"apiVersion": f"{NAMES.api_group}/{api.VERSION}", "kind": "GpuNodePool",
                              "metadata": {"name": "broken"}, "spec": {"consentMode": "sometimes"}})
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=20)
    [record] = h.records("n1")
    assert record["status"]["phase"] == "Scheduled" and record["status"]["hold"] == "NoRepairProvider"
    bare = h.api.read(h.pool_path("bare"))
    assert bare is not None
    ready = {c["type"]: c for c in bare["status"]["conditions"]}["RepairProviderReady"]
    assert ready["status"] == "False" and ready["reason"] == "NoRepairProvider"
    broken = h.api.read(h.pool_path("broken"))
    assert broken is not None
    valid = {c["type"]: c for c in broken["status"]["conditions"]}["Valid"]
    assert valid["status"] == "False" and "consentMode" in valid["message"]


def test_a_record_deleted_under_a_decision_is_not_a_lost_race(h: Harness) -> None:
    """A 404 on the status write: the record was deleted (kubectl delete), not out-raced. Nothing
    of the decision is done, the cache forgets the record at once, and the next look starts anew."""
    h.pool(mode="propose")
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    h.run(seconds=5)
    [first] = h.records("n1")
    assert first["status"]["phase"] == "AwaitingApproval"
    h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update({NAMES.maintenance_approved: "true"}))
    h.api.settle()

    def deleted_meanwhile(req: Request) -> None:
        if req.verb == "PATCH" and req.resource == "remediations/status":
            h.api.before.clear()
            h.api.remove(req.path.removesuffix("/status"))

    h.api.before.append(deleted_meanwhile)
    h.api.requests.clear()
    assert h.reconciler.reconcile("n1") == 0
    assert h.fleet.records_of("n1") == []  # forgotten before its watch event
    assert not any(r.resource == "nodes" for r in h.api.requests)  # nothing acted on the lost decision
    assert not any(e["reason"] == "MaintenanceApproved" for e in h.events())
    h.run(lambda: h.phase("n1") == "Succeeded")
    [again] = h.records("n1")
    # the same fault episode, so the same name; a new object
    assert again["metadata"]["uid"] != first["metadata"]["uid"] and again["status"]["approved"] is True


def _unmarking(req: Request) -> bool:
    return req.verb == "PATCH" and req.resource == "nodes" and isinstance(req.body, list) \
        and any(op["op"] == "remove" for op in req.body)


def test_a_heartbeat_since_the_cache_saw_the_node_costs_no_retry(h: Harness) -> None:
    """kubelet heartbeats move a node's resourceVersion all the time; the unmarking patch tests
    only what it removes, so a status write in between does not fail it: one PATCH, no read."""
    h.pool()
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    heartbeats: list[str] = []

    def heartbeat_first(req: Request) -> None:
        if _unmarking(req) and not heartbeats:
            heartbeats.append(req.path)
            h.api.edit("/api/v1/nodes/n1", lambda n: n["status"].update({"heartbeat": "now"}))

    h.api.before.append(heartbeat_first)
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=5)
    assert heartbeats
    assert [e["reason"] for e in h.events(EVENT_SUCCEEDED)] == [EVENT_SUCCEEDED]
    node = h.node_obj("n1")
    assert node is not None and not _marked(node) and not node["spec"].get("unschedulable")
    assert ("GET", "nodes") not in h.api.counts()
    assert len([r for r in h.api.requests if _unmarking(r)]) == 1


def test_a_change_of_what_the_patch_removes_is_a_lost_race_read_again_not_given_up(h: Harness) -> None:
    """Another writer changes a value the unmarking patch removes (here our taint's value): its
    `test` fails (the API server's generic 422), the node is read again and the patch is
    computed anew from what is there; the repair still ends with its event."""
    h.pool()
    h.node("n1")
    h.start()
    h.run()
    h.fault("n1")
    changed: list[str] = []

    def retaint_first(req: Request) -> None:
        if _unmarking(req) and not changed:
            changed.append(req.path)
            h.api.edit("/api/v1/nodes/n1", lambda n: [t.update({"value": "someone-else"})
                                                      for t in n["spec"]["taints"] if t["key"] == NAMES.taint_key])

    h.api.before.append(retaint_first)
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=5)
    assert changed
    assert [e["reason"] for e in h.events(EVENT_SUCCEEDED)] == [EVENT_SUCCEEDED]
    node = h.node_obj("n1")
    assert node is not None and not _marked(node) and not node["spec"].get("unschedulable")
    assert ("GET", "nodes") in h.api.counts()  # the one read the lost race cost
    assert len([r for r in h.api.requests if _unmarking(r)]) == 2


def test_a_provider_is_asked_again_only_about_nodes_that_changed(h: Harness) -> None:
    from autoclusters.api import RepairAction
    from autoclusters.sim import nodes as sim

    h.pool("p")
    for name in ("n1", "n2", "n3"):
        h.node(name)
    h.api.edit("/api/v1/nodes/n2", lambda n: n["metadata"]["annotations"].pop(sim.KWOK_NODE_ANNOTATION))
    asked: list[str] = []
    h.start()
    h.run()
    provider, _ = h.reconciler._provider(h.reconciler._fleet.pool_named("p"), RepairAction.RESET)
    assert provider is not None
    real = provider.refusal

    def counted(node: dict[str, Any] | None) -> str:
        asked.append((node or {})["metadata"]["name"])
        return real(node)

    provider.refusal = counted  # type: ignore[method-assign]

    def ready() -> dict[str, str]:
        pool = h.api.read(h.pool_path("p"))
        assert pool is not None
        return {c["type"]: c for c in pool["status"]["conditions"]}["RepairProviderReady"]

    assert ready()["status"] == "False" and "refuses 1 node(s) of the pool (n2)" in ready()["message"]
    h.api.edit("/api/v1/nodes/n2", lambda n: n["metadata"]["annotations"].update(
        {sim.KWOK_NODE_ANNOTATION: sim.KWOK_NODE_VALUE}))
    h.fault("n1")  # a change of the faulty count: the pool is reconciled
    h.run(lambda: ready()["status"] == "True", seconds=5, detector=False)
    assert ready()["status"] == "True"
    assert sorted(set(asked)) == ["n1", "n2"]  # n3 did not change: its answer was kept


def test_two_replacements_no_provider_names_never_count_one_new_node(h: Harness) -> None:
    """The command provider without ``new-node=``: two repairs of one pool wait in Verifying
    (their scripts removed the old nodes); one new Ready node comes, and exactly one of them
    claims it (its record names it); the other succeeds only on a second new node."""
    import sys
    import time

    from autoclusters.api import RepairAction
    from autoclusters.providers.command import CommandProvider
    from tests.unit.controller.harness import ROW_REMAP_FAILURE

    h.pool(maxConcurrentRepairs=2, circuitBreaker={"openAbovePercent": 90, "closeBelowPercent": 80},
           provider={"reset": {"type": "simulated"},
                     "replace": {"type": "command", "command": {"command": [sys.executable, "-c", "pass"]}}})
    for name in ("n1", "n2", "h1", "h2"):
        h.node(name)
    h.start()
    h.run()
    h.clock.advance(5)  # the pool's nodes are older than the repairs
    h.fault("n1", ROW_REMAP_FAILURE)
    h.fault("n2", ROW_REMAP_FAILURE)
    h.run(lambda: h.phase("n1") == h.phase("n2") == "Acting", detector=False)
    provider, _ = h.reconciler._provider(h.fleet.pool_named("p"), RepairAction.REPLACE)
    assert isinstance(provider, CommandProvider)
    deadline = time.monotonic() + 30  # the script runs in a thread, in real time: let both finish
    while len(provider._results) < 2 or provider._results.running():
        assert time.monotonic() < deadline, "the replacement scripts did not finish"
        time.sleep(0.01)
    h.run(lambda: h.phase("n1") == h.phase("n2") == "Verifying", detector=False)
    assert h.phase("n1") == h.phase("n2") == "Verifying"
    for old in ("n1", "n2"):  # what the scripts did: the old nodes are gone
        h.api.remove(f"/api/v1/nodes/{old}")
    h.run(seconds=10, detector=False)
    assert h.phase("n1") == h.phase("n2") == "Verifying"  # the nodes of before the repairs count for neither

    h.node("new-a")
    h.run(lambda: "Succeeded" in (h.phase("n1"), h.phase("n2")), seconds=30, detector=False)
    h.run(seconds=10, detector=False)  # time enough for the other repair to count it too, if it could
    phases = {node: h.phase(node) for node in ("n1", "n2")}
    assert sorted(phases.values()) == ["Succeeded", "Verifying"], phases  # one new node, one repair
    first = next(node for node, phase in phases.items() if phase == "Succeeded")
    other = "n2" if first == "n1" else "n1"
    [done] = h.records(first)
    assert done["status"]["replacementNode"] == "new-a"
    claim = (h.node_obj("new-a") or {})["metadata"]["annotations"]
    assert claim[NAMES.operation_annotation] == done["status"]["operation"]["id"]
    assert claim[f"{NAMES.api_group}/replaces"] == first

    h.node("new-b")
    h.run(lambda: h.phase(other) == "Succeeded", seconds=30, detector=False)
    [second] = h.records(other)
    assert second["status"]["phase"] == "Succeeded" and second["status"]["replacementNode"] == "new-b"


def test_a_pools_provider_and_policy_are_kept_per_pool_object_and_follow_its_spec(h: Harness) -> None:
    """A reconcile asks for the pool's provider and policy several times: each pool object's
    answer is kept, and a changed spec (a new object) is answered anew."""
    from autoclusters.api import RepairAction

    h.pool()
    h.start()
    h.run()
    first = h.fleet.pool_named("p")
    assert first is not None
    provider, block = h.reconciler._provider(first, RepairAction.RESET)
    assert provider is not None and block is None
    assert h.reconciler._provider(first, RepairAction.RESET)[0] is provider
    assert h.reconciler._policy(first) is h.reconciler._policy(first)
    assert h.reconciler._policy(first).reset_drain_seconds == 300

    h.pool(drain={"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 600}, provider={"type": "nonsense"})
    h.run(seconds=5)
    second = h.fleet.pool_named("p")
    assert second is not None and second is not first
    assert h.reconciler._policy(second).reset_drain_seconds == 120
    provider, block = h.reconciler._provider(second, RepairAction.RESET)
    assert provider is None and block is not None and "invalid" in block.message
    assert h.reconciler._provider(first, RepairAction.RESET)[0] is not None  # the old object's answer stands
