"""The controller's cache of the cluster: what counts as a change, pool membership, counts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names

NAMES = Names()


def test_fleet_ignores_heartbeats_and_follows_the_membership_rule() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    fleet._on_pool("sel", None, {"metadata": {"name": "sel"},
                                 "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}})

    def pool_of(labels: dict[str, str]) -> str | None:
        pool = fleet.pool_for({"metadata": {"labels": labels}})
        return pool.name if pool else None

    assert pool_of({NAMES.pool_label: "a", "zone": "z1"}) == "a"
    assert pool_of({"zone": "z1"}) == "sel"
    assert pool_of({NAMES.pool_label: "sel"}) is None

    def node(beat: str, fault: bool) -> dict:
        cond = {"type": NAMES.gpu_condition, "status": "True" if fault else "False", "lastHeartbeatTime": beat,
                "reason": "NvidiaXIDError" if fault else "NoGpuFaultDetected",
                "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)." if fault else ""}
        return {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "a"}},
                "status": {"conditions": [cond, {"type": "Ready", "status": "True", "lastHeartbeatTime": beat}]}}

    fleet._on_node("n1", None, node("t0", False))
    assert fleet.counts("a") == (1, 0)
    queued.clear()
    fleet._on_node("n1", node("t0", False), node("t1", False))  # a heartbeat
    assert queued == []
    fleet._on_node("n1", node("t1", False), node("t2", True))  # a fault
    assert "n1" in queued and POOL_KEY + "a" in queued and fleet.counts("a") == (1, 1)


def test_records_in_progress_are_counted_from_the_version_the_store_keeps() -> None:
    from autoclusters.controller.cache import Fleet

    fleet = Fleet(object(), NAMES, load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made

    def record(name: str, rv: int, phase: str | None) -> dict:
        return {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {"node": name, "pool": "a"},
                "status": {"phase": phase} if phase else {}}

    def watched(old: dict | None, new: dict | None, name: str = "r1") -> None:
        """The watch event through the informer (its store, then the handler)."""
        fleet.record_informer._apply({"type": "DELETED" if new is None else "MODIFIED", "object": new or old})

    watched(None, record("r1", 1, None))
    assert fleet.in_progress("a") == 0
    fleet.record_written(record("r1", 2, "Draining"))  # our own write, before the watch tells
    fleet.record_written(record("r2", 3, "Acting"))
    assert fleet.in_progress("a") == 2 and fleet.in_progress("a", exclude="r1") == 1
    watched(record("r1", 1, None), record("r1", 2, "Draining"))
    fleet.record_written(record("r1", 5, "Succeeded"))
    watched(record("r1", 2, "Draining"), record("r1", 4, "Verifying"))  # older than the store: ignored
    assert fleet.in_progress("a") == 1
    fleet.reserve("a", "r3")
    assert fleet.in_progress("a") == 2
    fleet.unreserve("a", "r3")
    watched(record("r2", 3, "Acting"), None, name="r2")  # deleted
    assert fleet.in_progress("a") == 0


def test_the_echo_of_our_own_record_write_is_not_reconciled_again() -> None:
    from autoclusters.controller.cache import Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    ours = {"metadata": {"name": "r1", "resourceVersion": "7"}, "spec": {"node": "n1", "pool": "a"},
            "status": {"phase": "Draining"}}
    fleet.record_written(ours)
    fleet._on_record("r1", fleet.record_informer.get("r1"), dict(ours))  # the watch brings it back
    assert queued == []
    theirs = {**ours, "metadata": {"name": "r1", "resourceVersion": "8"}, "status": {"phase": "Acting"}}
    fleet.record_informer.upsert(theirs)
    fleet._on_record("r1", ours, theirs)  # someone else's change
    assert queued == ["n1"]


def test_a_freed_slot_wakes_only_the_pools_repairs_not_yet_started() -> None:
    from autoclusters.controller.cache import Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    for i, phase in enumerate(["Scheduled", "Draining", None, "Succeeded", "AwaitingApproval", "Failed"]):
        fleet.record_written({"metadata": {"name": f"r{i}", "resourceVersion": "1"},
                              "spec": {"node": f"n{i}", "pool": "a"}, "status": {"phase": phase} if phase else {}})
    fleet.wake_held("a")
    assert sorted(queued) == ["n0", "n2", "n4"]
    queued.clear()
    fleet.record_written({"metadata": {"name": "r0", "resourceVersion": "2"}, "spec": {"node": "n0", "pool": "a"},
                          "status": {"phase": "Draining"}})  # started: no longer waits for a slot
    fleet.wake_held("a")
    assert sorted(queued) == ["n2", "n4"]


def test_a_change_of_a_pools_nodes_queues_the_pool_through_its_own_callback() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    nodes: list[str] = []
    pools: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), nodes.append, enqueue_pool=pools.append)  # type: ignore[arg-type]
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    assert nodes == [POOL_KEY + "a"]  # the pool's own change: at once
    fleet._on_node("n1", None, {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "a"}}})
    assert nodes[-1] == "n1" and pools == [POOL_KEY + "a"]  # a new member: through enqueue_pool


def test_a_node_the_cache_cannot_take_in_is_counted_by_the_controller_and_the_others_are_indexed() -> None:
    """The controller's wiring: a node whose condition the cache's callback raises on (here a
    catalog that fails on its message) is counted in autoclusters_informer_handler_errors_total;
    the nodes listed with it are indexed all the same, and its next change is taken again. The
    metric is each informer's own count (``Informer.handler_errors``, read by the collector every
    process with informers uses): every informer of the cache is exported, at 0 before its first
    error, so an alert on its increase sees the first one."""
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.manager import Controller
    from autoclusters.sim import nodes as sim
    from tests.unit.fakeapi import FakeApi

    class Failing:
        """The real catalog, failing on one message (a bug in parsing it)."""

        def __init__(self) -> None:
            self.real = load_catalog()

        def fault_from_condition(self, cond: dict, names: Names):
            if "poison" in (cond.get("message") or ""):
                raise ValueError("cannot parse the message")
            return self.real.fault_from_condition(cond, names)

    api = FakeApi()
    for name in ("n0", "bad", "n2"):
        node = sim.gpu_node_manifest(name, "a", NAMES)
        message = "poison" if name == "bad" else "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
        node["status"]["conditions"] = [{"type": NAMES.gpu_condition, "status": "True", "reason": "NvidiaXIDError",
                                         "message": message}]
        api.put("/api/v1/nodes", node)
    ctl = Controller(api.kube(), ControllerConfig(metrics_port=0), names=NAMES)
    ctl.fleet.fault_reader.catalog = Failing()  # type: ignore[assignment]
    ctl.fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    inf = ctl.fleet.node_informer

    def errors(informer: str = "nodes") -> float | None:
        return ctl.metrics.registry.get_sample_value("autoclusters_informer_handler_errors_total",
                                                     {"informer": informer})

    assert [errors(i.name) for i in ctl.fleet.informers()] == [0, 0, 0, 0]
    inf.start()
    try:
        assert inf.synced.wait(5)
        assert errors() == 1
        assert {"n0", "n2"} <= ctl.fleet.members("a")  # listed before and after it, indexed all the same
        api.min_watchers = 1
        api.settle()
        api.edit("/api/v1/nodes/bad", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.settle()
        assert errors() == 2 == inf.handler_errors
        assert [errors(i.name) for i in ctl.fleet.informers()[1:]] == [0, 0, 0]
    finally:
        inf.stop()
        api.close()


def _gpu_node(name: str, message: str, *, beat: str = "t0", ready_reason: bool = True) -> dict:
    fault = {"type": NAMES.gpu_condition, "status": "True", "reason": "NvidiaXIDError", "message": message,
             "lastHeartbeatTime": beat, "lastTransitionTime": "t0"}
    ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": beat}
    if ready_reason:
        ready.update(reason="KubeletReady", message="ok")
    return {"metadata": {"name": name, "labels": {NAMES.pool_label: "a"}}, "status": {"conditions": [fault, ready]}}


def test_a_fault_is_read_from_a_condition_once_and_from_a_node_object_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from autoclusters.controller.cache import Fleet
    from autoclusters.faults.catalog import Catalog, FaultRef

    read: list[str] = []
    real = Catalog._fault_from

    def counted(self: Catalog, ctype: str, reason: str, message: str, names: Names) -> FaultRef | None:
        read.append(message)
        return real(self, ctype, reason, message, names)

    monkeypatch.setattr(Catalog, "_fault_from", counted)
    fresh = dataclasses.replace(load_catalog())  # its own memory of the conditions read
    fleet = Fleet(object(), NAMES, fresh, lambda _key: None)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    xid79 = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    for i in range(20):
        fleet._on_node(f"n{i}", None, _gpu_node(f"n{i}", xid79))
    assert read == [xid79] and fleet.counts("a") == (20, 20)  # one message, read once

    node = _gpu_node("n0", "GPU 1 reported Xid 48 (double-bit ECC error).")
    fleet._on_node("n0", _gpu_node("n0", xid79), node)
    ref, cond = fleet.fault_of(node)
    assert ref is not None and ref.code == "48" and cond is node["status"]["conditions"][0]
    assert fleet.fault_of(node)[1] is cond and len(read) == 2  # the same object: not looked at again
    beat = _gpu_node("n0", "GPU 1 reported Xid 48 (double-bit ECC error).", beat="t1")
    again, cond = fleet.fault_of(beat)  # another version: its own condition, the fault read before
    assert again == ref and cond is beat["status"]["conditions"][0] and len(read) == 2

    fleet._on_node("n0", node, None)  # deleted: forgotten, and not remembered by a late reader
    assert fleet.fault_of(node)[0] == ref and not fleet.fault_reader.remembers("n0")


def test_a_condition_without_a_reason_fingerprints_as_one_with_an_empty_reason() -> None:
    from autoclusters.controller.cache import Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    xid = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    bare = _gpu_node("n1", xid, ready_reason=False)
    empty = _gpu_node("n1", xid, beat="t1")
    empty["status"]["conditions"][1].update(reason="", message="")
    assert fleet.node_index.fingerprint(bare) == fleet.node_index.fingerprint(empty)
    fleet._on_node("n1", None, bare)
    queued.clear()
    fleet._on_node("n1", bare, empty)
    assert queued == []  # a heartbeat either way
    fleet._on_node("n1", empty, _gpu_node("n1", xid, beat="t2"))  # the Ready reason changed
    assert queued == ["n1"]


def test_member_changes_mark_the_nodes_that_joined_left_or_changed() -> None:
    from autoclusters.controller.cache import Fleet

    fleet = Fleet(object(), NAMES, load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    changes = fleet.track_members()
    for pool in ("a", "b"):
        fleet._on_pool(pool, None, {"metadata": {"name": pool}, "spec": {}})
    xid = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    fleet._on_node("n1", None, _gpu_node("n1", xid))
    fleet._on_node("n2", None, _gpu_node("n2", xid))
    assert changes.take("a") == {"n1", "n2"} and changes.take("a") == set()
    fleet._on_node("n1", _gpu_node("n1", xid), _gpu_node("n1", xid, beat="t1"))  # a heartbeat
    assert changes.take("a") == set()
    moved = _gpu_node("n2", xid)
    moved["metadata"]["labels"][NAMES.pool_label] = "b"
    fleet._on_node("n2", _gpu_node("n2", xid), moved)
    assert changes.take("a") == {"n2"} and changes.take("b") == {"n2"}
    fleet._on_node("n2", moved, None)
    assert changes.take("b") == {"n2"}


def test_a_pool_status_change_keeps_the_parsed_spec_and_a_spec_change_reindexes(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    from autoclusters.controller import pool_store
    from autoclusters.controller.cache import POOL_KEY, Fleet

    parsed: list[str] = []
    real = pool_store.parse_pool

    def counted(obj: dict) -> pool_store.Pool:
        parsed.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr(pool_store, "parse_pool", counted)
    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet.node_informer.synced.set()

    def pool(rv: int, spec: dict, state: str) -> dict:
        return {"metadata": {"name": "a", "resourceVersion": str(rv)}, "spec": spec,
                "status": {"circuitBreaker": {"state": state}}}

    first = pool(1, {}, "Closed")
    fleet.pool_informer.upsert(first)
    fleet._on_pool("a", None, first)
    node = {"metadata": {"name": "n1", "labels": {"zone": "z1"}}}
    fleet.node_informer.upsert(node)
    fleet._on_node("n1", None, node)
    assert parsed == ["a"] and fleet.counts("a") == (0, 0)

    ours = pool(2, {}, "Open")
    fleet.pool_written(ours)
    echo = pool(2, {}, "Open")
    fleet.pool_informer.upsert(echo)
    fleet._on_pool("a", ours, echo)
    assert parsed == ["a"]  # status only: the spec parsed once
    assert fleet.pool_named("a").breaker_state == "Open"  # type: ignore[union-attr]

    # Our next status write's answer carries a spec someone changed meanwhile: members follow it.
    queued.clear()
    selecting = {"nodeSelector": {"matchLabels": {"zone": "z1"}}}
    fleet.pool_written(pool(4, selecting, "Closed"))
    assert parsed == ["a", "a"] and fleet.counts("a") == (1, 0) and POOL_KEY + "a" in queued
    late = pool(3, selecting, "Open")  # the watch event of their change, older than the store
    fleet.pool_informer._apply({"type": "MODIFIED", "object": late})
    assert fleet.counts("a") == (1, 0)
    assert fleet.pool_named("a").obj is fleet.pool_informer.get("a")  # type: ignore[union-attr]


def test_a_watch_event_older_than_our_own_pool_write_does_not_regress_the_parsed_pool() -> None:
    """Our status write is in the store and the parsed pool at once; the watch event of an earlier
    change (someone's, or our previous write's) arrives after it: the pool stays at our version.
    Before the fix the informer handed the older object over and the pool's status regressed."""
    from autoclusters.controller.cache import POOL_KEY, Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made

    def pool(rv: int, state: str) -> dict:
        return {"metadata": {"name": "a", "resourceVersion": str(rv)}, "spec": {},
                "status": {"circuitBreaker": {"state": state}}}

    fleet.pool_informer._apply({"type": "ADDED", "object": pool(1, "Closed")})
    ours = pool(3, "Open")
    fleet.pool_written(ours)
    queued.clear()
    fleet.pool_informer._apply({"type": "MODIFIED", "object": pool(2, "Closed")})  # from before our write
    assert fleet.pool_informer.get("a") is ours
    assert fleet.pool_named("a").obj is ours and fleet.pool_named("a").breaker_state == "Open"  # type: ignore[union-attr]
    assert queued == [POOL_KEY + "a"]  # still told: our write may carry a change it had not seen
    fleet.pool_informer._apply({"type": "MODIFIED", "object": pool(3, "Open")})  # the echo of our write
    assert fleet.pool_named("a").breaker_state == "Open"  # type: ignore[union-attr]


def test_a_change_that_keeps_labels_and_conditions_keeps_the_indexes_without_looking_again() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    nodes: list[str] = []
    pools: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), nodes.append, enqueue_pool=pools.append)  # type: ignore[arg-type]
    changes = fleet.track_members()
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    looked: list[str] = []
    real = fleet.pool_store.pool_for

    def pool_for(node: dict) -> object:
        looked.append(node["metadata"]["name"])
        return real(node)

    fleet.pool_store.pool_for = pool_for  # type: ignore[method-assign,assignment]
    xid = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    v1 = _gpu_node("n1", xid)
    fleet._on_node("n1", None, v1)
    assert looked == ["n1"] and fleet.counts("a") == (1, 1) and changes.take("a") == {"n1"}
    nodes.clear()
    pools.clear()
    v2 = _gpu_node("n1", xid, beat="t1")
    v2["metadata"]["annotations"] = {"example.com/op": "started"}
    v2["spec"] = {"unschedulable": True}
    fleet._on_node("n1", v1, v2)
    assert looked == ["n1"]  # the same labels and conditions: not indexed again
    assert nodes == ["n1"] and pools == [] and changes.take("a") == {"n1"}  # but a change all the same
    assert fleet.counts("a") == (1, 1)
    v3 = _gpu_node("n1", "GPU 1 reported Xid 48 (double-bit ECC error).", beat="t2")
    fleet._on_node("n1", v2, v3)  # another fault: looked at again
    assert looked == ["n1", "n1"] and fleet.counts("a") == (1, 1)
    v4 = _gpu_node("n1", xid, beat="t3")
    v4["status"]["conditions"][0]["status"] = "False"
    fleet._on_node("n1", v3, v4)  # the fault cleared: no longer faulty, the pool queued
    assert fleet.counts("a") == (1, 0) and pools == [POOL_KEY + "a"]


def test_a_node_whose_indexing_raised_is_indexed_at_its_next_event_even_a_heartbeat() -> None:
    from autoclusters.controller.cache import Fleet

    class FailingOnce:
        """The real catalog, failing on its first read (a bug met once)."""

        def __init__(self) -> None:
            self.real, self.failed = load_catalog(), False

        def fault_from_condition(self, cond: dict, names: Names) -> object:
            if not self.failed:
                self.failed = True
                raise ValueError("cannot parse the message")
            return self.real.fault_from_condition(cond, names)

    fleet = Fleet(object(), NAMES, FailingOnce(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    xid = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    with pytest.raises(ValueError):
        fleet._on_node("n1", None, _gpu_node("n1", xid))
    fleet._on_node("n1", _gpu_node("n1", xid), _gpu_node("n1", xid, beat="t1"))  # only a heartbeat
    assert fleet.counts("a") == (1, 1)


def test_taints_others_set_wake_no_reconcile_but_the_maintenance_taint_does() -> None:
    """The node lifecycle controller taints a node not-ready and unschedulable through every
    reset and cordon: four node changes a repair need not look at. The maintenance taint is
    the one a reconcile reads (a leftover to clean, a mark to keep)."""
    import copy

    from autoclusters.controller.cache import Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    xid = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    before = _gpu_node("n1", xid)
    before["spec"] = {"providerID": "kwok://n1", "taints": [gpu]}
    fleet._on_node("n1", None, before)
    queued.clear()

    def changed(edit: Any) -> dict:
        node = copy.deepcopy(before)
        edit(node["spec"])
        return node

    not_ready = changed(lambda s: s["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}))
    fleet._on_node("n1", before, not_ready)
    untainted = changed(lambda s: s.pop("taints"))
    fleet._on_node("n1", not_ready, untainted)
    fleet._on_node("n1", untainted, before)
    assert queued == []
    marked = changed(lambda s: s["taints"].append({"key": NAMES.taint_key, "effect": "NoSchedule"}))
    fleet._on_node("n1", before, marked)
    assert queued == ["n1"]
    cordoned = copy.deepcopy(marked)
    cordoned["spec"]["unschedulable"] = True  # the rest of the spec still counts
    fleet._on_node("n1", marked, cordoned)
    assert queued == ["n1", "n1"]


def test_a_record_event_of_a_version_we_wrote_queues_nothing() -> None:
    from autoclusters.controller.cache import Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made

    def record(rv: str, phase: str | None) -> dict:
        obj: dict = {"metadata": {"name": "r1", "resourceVersion": rv}, "spec": {"node": "n1", "pool": "a"}}
        if phase:
            obj["status"] = {"phase": phase}
        return obj

    created, ours = record("1", None), record("2", "Acting")
    fleet.record_written(created)
    fleet.record_written(ours)
    fleet._on_record("r1", created, ours)  # the create's event after our status write: the store keeps ours
    fleet._on_record("r1", ours, record("2", "Acting"))  # our write's own echo
    assert queued == []
    fleet._on_record("r1", ours, record("3", "Acting"))  # someone else's change of the record
    assert queued == ["n1"]
    fleet._on_record("r1", record("3", "Acting"), None)  # deleted: forgotten
    assert fleet.record_index.is_news("r1", None, {"metadata": {"resourceVersion": "2"}})


def test_every_watch_of_the_cache_runs_for_watch_seconds() -> None:
    from autoclusters.controller.cache import Fleet
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.faults.catalog import load_catalog
    from autoclusters.kube.informer import WATCH_SECONDS
    from autoclusters.names import Names

    default = Fleet(object(), Names(), load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    short = Fleet(object(), Names(), load_catalog(), lambda _key: None, watch_seconds=2)  # type: ignore[arg-type]
    assert ControllerConfig().watch_seconds == WATCH_SECONDS
    assert [i._watch_timeout for i in default.informers()] == [WATCH_SECONDS] * 4
    assert [i._watch_timeout for i in short.informers()] == [2] * 4


def test_the_caches_keep_no_managed_fields_of_our_own_writes() -> None:
    """Every informer of the controller drops ``metadata.managedFields`` (half a node's memory),
    and our own writes, stored at once, are stored the same way."""
    from autoclusters.controller.cache import Fleet
    fleet = Fleet(object(), NAMES, load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    managed = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    fleet.node_written({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "n1", "resourceVersion": "5", "managedFields": managed}, "status": {}})
    stored = fleet.node_informer.get("n1")
    assert stored is not None and "managedFields" not in stored["metadata"]
    informers = (fleet.node_informer, fleet.pool_informer, fleet.record_informer, fleet.default_informer)
    for inf in informers:
        taken = inf._take({"metadata": {"name": "x", "managedFields": managed}})
        assert taken is not None and "managedFields" not in taken["metadata"], inf.name
