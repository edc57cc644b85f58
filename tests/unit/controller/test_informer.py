"""The informer against the fake API server: list, watch, our own writes, expiry, errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

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


def test_a_handler_that_raises_does_not_stop_the_informer() -> None:
    api = FakeApi()
    calls: list[str] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "bad" and calls.count("bad") == 1:
            raise RuntimeError("a bug in a handler (once)")

    inf = Informer(api.kube(), "/api/v1/nodes", handler)
    inf.start()
    assert inf.synced.wait(5)
    api.min_watchers = 1
    api.settle()
    api.put("/api/v1/nodes", _node("bad"))
    _wait("the relist after the failure", lambda: calls.count("bad") == 2, timeout=10)
    assert inf.get("bad") is not None
    api.put("/api/v1/nodes", _node("good"))
    _wait("later changes", lambda: "good" in calls, timeout=10)
    inf.stop()
    api.close()
