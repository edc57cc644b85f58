"""The informer against the fake API server: list, watch, our own writes, expiry, errors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from autoclusters.kube.informer import Informer
from tests.unit.fakeapi import ApiError, FakeApi, Request

JSON = dict[str, Any]


def _node(name: str, **labels: str) -> JSON:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


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
    counted: list[str] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "poison":
            raise KeyError("a field the handler cannot do without")

    inf = Informer(api.kube(), "/api/v1/nodes", handler, name="nodes", backoff=0.01, on_handler_error=counted.append)
    with caplog.at_level(logging.ERROR, logger="autoclusters.kube.informer"):
        inf.start()
        assert inf.synced.wait(5), "the list never ended: one object's handler error stalled the informer"
        api.min_watchers = 1
        api.settle()
        assert sorted(calls) == ["a", "b", "poison"]
        assert inf.handler_errors == 1 and counted == ["nodes"]
        assert any("poison" in r.getMessage() for r in caplog.records)
        assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "b", "poison"]  # the store is the API's

        api.edit("/api/v1/nodes/a", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.put("/api/v1/nodes", _node("c"))
        api.edit("/api/v1/nodes/poison", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.edit("/api/v1/nodes/b", lambda n: n["metadata"]["labels"].update(gen="2"))
        api.settle()
    assert calls[3:] == ["a", "c", "poison", "b"]  # in order, the poison object tried again at its next event
    assert inf.handler_errors == 2 and counted == ["nodes", "nodes"]
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
