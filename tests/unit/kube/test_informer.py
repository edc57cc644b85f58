"""The informer against the fake API server: list, watch, our own writes, expiry, errors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from autoclusters.kube import Kube
from autoclusters.kube.informer import Informer
from tests.unit import builders
from tests.unit.fakeapi import ApiError, FakeApi, Request

JSON = dict[str, Any]


def _node(name: str, **labels: str) -> JSON:
    return builders.node(name, pool="", labels=labels, detected=False)


def _wait(what: str, check: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_list_then_watch_calls_back_every_change_in_order() -> None:
    api = FakeApi()
    api.put("/api/v1/nodes", _node("a", pool="x"))
    api.put("/api/v1/nodes", _node("b", pool="y"))
    seen: list[tuple[str, str | None, str | None]] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        seen.append((name, (old or {}).get("metadata", {}).get("resourceVersion"),
                     (new or {}).get("metadata", {}).get("resourceVersion")))

    inf = Informer(api.kube(), "/api/v1/nodes", handler, label_selector="pool=x", name="nodes")
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    assert [s[0] for s in seen] == ["a"] and inf.get("b") is None
    rv_a = inf.get("a")["metadata"]["resourceVersion"]  # type: ignore[index]
    api.put("/api/v1/nodes", _node("c", pool="x"))
    api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].update(gen="2"))
    api.remove("/api/v1/nodes/c")
    api.settle()
    assert [(n, o is not None, w is not None) for n, o, w in seen[1:]] == [
        ("c", False, True), ("a", True, True), ("c", True, False)]
    assert seen[2][1] == rv_a
    assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a"]
    assert [r.verb for r in api.requests] == ["LIST", "WATCH"]  # one list, one watch: no polling
    inf.stop()
    api.close()


def test_our_own_write_is_kept_unless_the_store_holds_a_newer_one() -> None:
    api = FakeApi()
    api.put("/api/v1/nodes", _node("a"))
    inf = Informer(api.kube(), "/api/v1/nodes", lambda *_: None)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    newer = api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].update(x="1"))
    api.settle()
    older = {**newer, "metadata": {**newer["metadata"], "resourceVersion": "1"}}
    inf.upsert(older)
    assert inf.get("a") == newer
    newest = {**newer, "metadata": {**newer["metadata"], "resourceVersion": str(int(
        newer["metadata"]["resourceVersion"]) + 5)}}
    inf.upsert(newest)
    assert inf.get("a") == newest
    inf.remove("a")
    assert inf.get("a") is None
    inf.stop()
    api.close()


def test_an_expired_watch_lists_again_and_reports_what_changed_meanwhile() -> None:
    api = FakeApi()
    api.put("/api/v1/nodes", _node("a"))
    api.put("/api/v1/nodes", _node("b"))
    seen: list[tuple[str, bool]] = []
    inf = Informer(api.kube(), "/api/v1/nodes", lambda n, o, w: seen.append((n, w is not None)), watch_timeout=1)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    api.min_watchers = 0  # the watch is ended on purpose below
    # the watch breaks, history is compacted and b is deleted while nobody watches
    api.before.append(_refuse_watches)
    api.close()
    _wait("the watch to end", lambda: api.watching("nodes") == 0)
    api.closed = False
    api.remove("/api/v1/nodes/b")
    api.compact()
    api.before.clear()
    _wait("the relist", lambda: ("b", False) in seen, timeout=10)
    assert inf.get("b") is None and inf.get("a") is not None
    assert [r.verb for r in api.requests].count("LIST") == 2
    inf.stop()
    api.close()


def _refuse_watches(req: Request) -> None:
    if req.verb == "WATCH":
        raise ApiError(500, "the API server is restarting")


def test_a_poison_object_is_its_own_error_the_others_are_delivered_and_later_changes_flow(
        caplog: pytest.LogCaptureFixture) -> None:
    """A handler that always raises on one object: the list still ends (synced), the others are
    handed over, the watch opens and later changes flow; the poison object is logged by name,
    counted, and handed over again at its next event, without a relist."""
    api = FakeApi()
    for name in ("a", "poison", "b"):
        api.put("/api/v1/nodes", _node(name))
    calls: list[str] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "poison":
            raise KeyError("a field the handler cannot do without")

    inf = Informer(api.kube(), "/api/v1/nodes", handler, name="nodes", backoff=0.01)
    with caplog.at_level(logging.ERROR, logger="autoclusters.kube.informer"):
        inf.start()
        assert inf.synced.wait(5), "the list never ended: one object's handler error stalled the informer"
        api.min_watchers = 1
        api.settle()
        assert sorted(calls) == ["a", "b", "poison"]
        assert inf.handler_errors == 1
        assert any("poison" in r.getMessage() for r in caplog.records)
        assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "b", "poison"]  # the store is the API's

        api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.put("/api/v1/nodes", _node("c"))
        api.edit("/api/v1/nodes/poison", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.edit("/api/v1/nodes/b", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.settle()
    assert calls[3:] == ["a", "c", "poison", "b"]  # in order, the poison object tried again at its next event
    assert inf.handler_errors == 2
    assert inf.get("b")["metadata"]["labels"] == {"gen": "2"}  # type: ignore[index]
    assert [r.verb for r in api.requests] == ["LIST", "WATCH"]  # no relist, no backoff
    inf.stop()
    api.close()


def test_a_poison_object_is_tried_again_at_the_next_list() -> None:
    """After an expired watch, the fresh list hands the poison object over again (and the others)."""
    api = FakeApi()
    api.put("/api/v1/nodes", _node("poison"))
    api.put("/api/v1/nodes", _node("a"))
    calls: list[str] = []
    healed = False

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "poison" and not healed:
            raise RuntimeError("a bug in a handler")

    inf = Informer(api.kube(), "/api/v1/nodes", handler, watch_timeout=1)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    assert inf.handler_errors == 1
    healed = True  # the bug is gone (a fixed pool, a fixed catalog) before the next list
    api.min_watchers = 0
    api.before.append(_refuse_watches)
    api.close()
    _wait("the watch to end", lambda: api.watching("nodes") == 0)
    api.closed = False
    api.compact()
    api.before.clear()
    _wait("the relist", lambda: calls.count("poison") == 2 and calls.count("a") == 2, timeout=10)
    assert inf.handler_errors == 1
    inf.stop()
    api.close()


def _expire_the_watch(api: FakeApi, plural: str) -> None:
    """Ends the open watches and answers the next watch of ``plural`` 410 Gone (its history was
    compacted away): that informer lists again at once, the others resume their watches."""
    def gone(req: Request) -> None:
        if req.verb == "WATCH" and req.resource == plural and gone in api.before:
            api.before.remove(gone)
            raise ApiError(410, "too old resource version")

    api.min_watchers = 0
    api.before.append(gone)
    api.close()
    _wait("the watches to end", lambda: api.watching(plural) == 0)
    api.closed = False


def _on_list(api: FakeApi, path: str, then: Callable[[int], None]) -> list[int]:
    """Calls ``then(n)`` once the n-th list of ``path`` is answered, before the informer applies
    it: what the controller does meanwhile (a create, a delete) is after the list's snapshot."""
    answered: list[int] = []

    def listed(req: Request) -> None:
        if req.verb == "LIST" and req.path == path:
            answered.append(len(answered) + 1)
            then(len(answered))

    api.on_request("LIST", path, listed, after=True)
    return answered


def _changes(seen: list[tuple[str, JSON | None, JSON | None]], name: str) -> list[tuple[str | None, str | None]]:
    rv = lambda o: None if o is None else o["metadata"]["resourceVersion"]  # noqa: E731
    return [(rv(old), rv(new)) for n, old, new in seen if n == name]


def _nodes_a_and_c() -> tuple[FakeApi, Kube, Informer, list[tuple[str, JSON | None, JSON | None]]]:
    """Nodes a and c on a fake API, and an informer of nodes that records what it hands over."""
    api = FakeApi()
    for name in ("a", "c"):
        api.put("/api/v1/nodes", _node(name))
    kube = api.kube()
    seen: list[tuple[str, JSON | None, JSON | None]] = []
    inf = Informer(kube, "/api/v1/nodes", lambda n, o, w: seen.append((n, o, w)), name="nodes")
    return api, kube, inf, seen


def test_an_object_created_after_the_list_was_answered_survives_the_relist_never_seen_deleted() -> None:
    """The controller creates b (and puts its answer into the store) after the relist's list
    was answered: the list cannot hold it. b stays in the store, is handed over unchanged, and
    never as deleted; the watch, from the list's version, then brings b's own event. a, deleted
    while the watch was down, is deleted; c, which we wrote before the list and someone deleted
    before it too, is deleted as well (its version is not newer than the list's)."""
    api, kube, inf, seen = _nodes_a_and_c()

    def meanwhile(n: int) -> None:
        if n == 2:
            created = kube.create("/api/v1/nodes", _node("b"))
            inf.upsert(created)
            assert inf.get("b") == created

    answered = _on_list(api, "/api/v1/nodes", meanwhile)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    inf.upsert(api.edit("/api/v1/nodes/c", lambda n: n["metadata"]["labels"].update(ours="1")))
    api.settle()
    _expire_the_watch(api, "nodes")
    api.remove("/api/v1/nodes/a")
    api.remove("/api/v1/nodes/c")
    _wait("the relist", lambda: len(answered) == 2)
    api.min_watchers = 1
    api.settle()
    b = api.read("/api/v1/nodes/b")
    assert b is not None and inf.get("b") == b
    rv_b = b["metadata"]["resourceVersion"]
    assert _changes(seen, "b") == [(rv_b, rv_b), (rv_b, rv_b)]  # the relist's, then the watch's ADDED
    assert _changes(seen, "a")[-1][1] is None and inf.get("a") is None
    assert _changes(seen, "c")[-1][1] is None and inf.get("c") is None
    assert [r.verb for r in api.requests].count("LIST") == 2
    inf.stop()
    api.close()


def test_an_object_we_deleted_after_the_list_was_answered_is_not_brought_back() -> None:
    """The controller deletes c (``remove``) after the relist's list, which still holds c, was
    answered: c stays out of the store and is never handed over as added again; the watch then
    tells of its deletion. An object created again under the name is taken in."""
    api, kube, inf, seen = _nodes_a_and_c()

    def meanwhile(n: int) -> None:
        if n == 2:
            kube.delete("/api/v1/nodes/c")
            inf.remove("c")

    answered = _on_list(api, "/api/v1/nodes", meanwhile)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    rv_c = inf.get("c")["metadata"]["resourceVersion"]  # type: ignore[index]
    _expire_the_watch(api, "nodes")
    _wait("the relist", lambda: len(answered) == 2)
    api.min_watchers = 1
    api.settle()
    assert inf.get("c") is None
    assert _changes(seen, "c") == [(None, rv_c), (None, None)]  # the first list's, then the watch's DELETED
    again = kube.create("/api/v1/nodes", _node("c"))
    api.settle()
    assert inf.get("c") == again and _changes(seen, "c")[-1] == (None, again["metadata"]["resourceVersion"])
    inf.stop()
    api.close()


def test_a_transform_that_raises_on_one_object_skips_it_without_a_relist_and_the_others_flow(
        caplog: pytest.LogCaptureFixture) -> None:
    """A transform that cannot take one object (a malformed node): the list still ends, the
    others are stored and handed over, the watch opens and later changes flow, all without a
    second list; the object is logged by name and counted, and taken in once it transforms. An
    object already stored keeps its last good version while a newer one does not transform."""
    api = FakeApi()
    for name in ("a", "bad", "b"):
        api.put("/api/v1/nodes", _node(name, **({"broken": "1"} if name == "bad" else {})))
    seen: list[tuple[str, JSON | None, JSON | None]] = []

    def strict(node: JSON) -> JSON:
        if "broken" in node["metadata"]["labels"]:
            raise ValueError("a node this reader cannot take")
        return node

    inf = Informer(api.kube(), "/api/v1/nodes", lambda n, o, w: seen.append((n, o, w)), name="nodes",
                   transform=strict, backoff=0.01)
    with caplog.at_level(logging.ERROR, logger="autoclusters.kube.informer"):
        inf.start()
        assert inf.synced.wait(5), "the list never ended: one object's transform error stalled the informer"
        api.min_watchers = 1
        api.settle()
        assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "b"]
        assert [n for n, _, _ in seen] == ["a", "b"]
        assert inf.handler_errors == 1
        assert [r.getMessage() for r in caplog.records if "bad" in r.getMessage()]

        good_a = inf.get("a")
        api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].update(broken="1"))
        api.put("/api/v1/nodes", _node("c"))
        api.edit("/api/v1/nodes/bad", lambda n: n["metadata"]["labels"].update(gen="2"))  # still broken
        api.settle()
    assert [n for n, _, _ in seen[2:]] == ["c"]
    assert inf.get("a") is good_a and inf.get("bad") is None  # the last good version; nothing for bad
    assert inf.handler_errors == 3
    healed = api.edit("/api/v1/nodes/bad", lambda n: n["metadata"]["labels"].pop("broken"))
    api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].pop("broken"))
    api.remove("/api/v1/nodes/b")
    api.settle()
    assert inf.get("bad") == healed and _changes(seen, "bad") == [(None, healed["metadata"]["resourceVersion"])]
    assert _changes(seen, "a")[-1][0] == good_a["metadata"]["resourceVersion"]  # type: ignore[index]
    assert inf.get("b") is None and inf.handler_errors == 3
    assert [r.verb for r in api.requests] == ["LIST", "WATCH"]  # no relist, no backoff
    inf.stop()
    api.close()


def test_a_record_started_after_the_list_keeps_its_pools_slot_across_the_relist() -> None:
    """What the relist gap cost the controller: a repair record created (and moved to Draining)
    after the relist's list was answered was handed to the cache as deleted, so its pool's
    repair looked finished, its slot free, and the pool's held repairs were woken to start past
    maxConcurrentRepairs. Now the record keeps its slot and nothing is woken."""
    from autoclusters import api as crd
    from autoclusters.controller.cache import Fleet
    from autoclusters.faults.catalog import load_catalog
    from autoclusters.names import Names

    names = Names()
    records = Kube.custom_path(names.api_group, crd.VERSION, crd.REMEDIATIONS.plural)
    api = FakeApi()
    kube = api.kube()
    queued: list[str] = []
    fleet = Fleet(kube, names, load_catalog(), queued.append)

    def record(name: str, node: str, phase: str) -> JSON:
        kube.create(records, {"metadata": {"name": name}, "spec": {"node": node, "pool": "a"}})
        return kube.patch(f"{records}/{name}/status", {"status": {"phase": phase}})

    record("held", "n-held", "Scheduled")  # waits for a slot

    def meanwhile(n: int) -> None:
        if n == 2:  # the controller starts a repair; its writes go into the store at once
            fleet.record_written(record("started", "n-started", "Draining"))

    answered = _on_list(api, records, meanwhile)
    fleet.start(timeout=5)
    api.min_watchers = 4
    api.settle()
    assert fleet.in_progress("a") == 0
    queued.clear()
    _expire_the_watch(api, crd.REMEDIATIONS.plural)
    _wait("the relist", lambda: len(answered) == 2)
    api.min_watchers = 4
    api.settle()
    assert fleet.in_progress("a") == 1
    assert "n-held" not in queued, "the held repair was woken: the started one looked finished"
    fleet.stop()
    api.close()
