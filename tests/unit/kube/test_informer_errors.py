"""The informer's one error policy, step by step against the fake API server answering from a
script: resume after a watch the server ended, list again at once on 410 Gone, list again after
a doubling backoff on any other error of the list or watch (reset once a list succeeds), a
handler's error on one object kept to that object; and its transform."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

from autoclusters.kube.errors import Forbidden, KubeError, Throttled, Unavailable
from autoclusters.kube.informer import Informer, without_managed_fields
from tests.unit.fakeapi import Answer, FakeApi, Request

JSON = dict[str, Any]


def obj(name: str, rv: int, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, **extra}


NODES = "/api/v1/nodes"
EMPTY: JSON = {"kind": "List", "items": [], "metadata": {"resourceVersion": "0"}}


def _error(e: KubeError) -> Answer:
    """``e`` as the API server answers it: flow control's plain-text 429 with its Retry-After,
    503 for a server away, else a Status object of ``e``'s code."""
    if isinstance(e, Throttled):
        return Answer(429, b"Too many requests, please try again later.\n", headers={"Retry-After": str(e.retry_after)})
    code = 503 if isinstance(e, Unavailable) else int(e.status or 500)
    return Answer(code, {"kind": "Status", "status": "Failure", "message": str(e), "code": code})


def _answer(kind: str, step: Any) -> Answer:
    """A step of the script as the server's answer: a list ``(items, resourceVersion)``; a
    watch ``(events, end)``, ``end`` None for a watch the server ended, a 410 for the error
    event of a compacted history, another error for the watch request's own answer; or an
    error answered to the request."""
    if isinstance(step, KubeError):
        return _error(step)
    if kind == "list":
        items, rv = step
        return Answer(body={"kind": "List", "items": items, "metadata": {"resourceVersion": rv}})
    events, end = step
    if end is None:
        return Answer(events=events)
    if end.status == 410:
        gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": str(end)}}
        return Answer(events=itertools.chain(events, [gone]))
    assert not events, "a watch refused by its answer has no events"
    return _error(end)


class ScriptedApi:
    """The fake API server answering the informer's lists and watches from a script, in order
    (a step is taken when its request comes, so a test may add steps after building the
    informer); once the script runs out it stops the informer and answers empty. The client's
    own retry of a throttled request is off, so the informer's policy is what is seen."""

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script = script
        self.api = FakeApi()
        self.kube = self.api.kube()
        self.kube.throttle_retries = 0
        self.informer: Informer | None = None
        self.api.on_request("*", NODES, self._next)

    def _next(self, req: Request) -> None:
        assert self.informer is not None
        kind = "list" if req.verb == "LIST" else "watch"
        if not self.script:
            self.informer.stop()
            self.api.answer_next(req.verb, req.path, Answer(body=EMPTY) if kind == "list" else Answer())
            return
        want, step = self.script.pop(0)
        assert want == kind, f"expected a {want}, the informer made a {kind} (calls so far: {self.calls})"
        self.api.answer_next(req.verb, req.path, _answer(kind, step))

    @property
    def calls(self) -> list[str]:
        return ["list" if r.verb == "LIST" else f"watch@{r.query['resourceVersion']}" for r in self.api.requests]


class RecordingStop(threading.Event):
    """The informer's stop event, recording each backoff wait instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return self.is_set()


def informer(script: list[tuple[str, Any]], **kw: Any) -> tuple[Informer, ScriptedApi, RecordingStop, list[Any]]:
    kube = ScriptedApi(script)
    seen: list[tuple[str, str | None, str | None]] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        rv = lambda o: None if o is None else o["metadata"]["resourceVersion"]  # noqa: E731
        seen.append((name, rv(old), rv(new)))

    inf = Informer(kube.kube, NODES, handler, backoff=0.5, max_backoff=1.0, **kw)
    kube.informer = inf
    stop = RecordingStop()
    inf._stop = stop
    return inf, kube, stop, seen


def test_resume_on_end_relist_at_once_on_410_and_back_off_doubling_on_other_errors() -> None:
    inf, kube, stop, seen = informer([
        ("list", ([obj("a", 1)], "10")),
        ("watch", ([{"type": "MODIFIED", "object": obj("a", 11)}], KubeError("too old", status=410))),
        ("list", ([obj("a", 12), obj("b", 13)], "20")),
        ("watch", ([], Unavailable("connection refused"))),
        ("list", Unavailable("connection refused")),
        ("list", Unavailable("connection refused")),
        ("list", ([obj("b", 13)], "30")),
        ("watch", ([{"type": "BOOKMARK", "object": obj("", 31)}], None)),  # the server ended it
        ("watch", ([], Forbidden("forbidden", status=403))),
        ("list", ([obj("b", 13)], "40")),
    ])
    inf._run()
    assert kube.calls == ["list", "watch@10", "list", "watch@20", "list", "list", "list", "watch@30", "watch@31",
                          "list", "watch@40"]
    assert stop.waits == [0.5, 1.0, 1.0, 0.5]  # none for the 410 or the ended watch; reset after a list
    assert seen == [("a", None, "1"), ("a", "1", "11"), ("a", "11", "12"), ("b", None, "13"),
                    ("b", "13", "13"), ("a", "12", None),  # gone while the API was down: deleted on the list
                    ("b", "13", "13")]
    assert [o["metadata"]["name"] for o in inf.items()] == ["b"] and inf.synced.is_set()
    # each list counted once, by why it was made: the start, the 410, the errors (a failed list counts none)
    assert inf.lists == {"initial": 1, "expired": 1, "error": 2}


def test_a_handler_that_raises_on_one_object_is_that_objects_error_alone() -> None:
    """No relist and no backoff: the other objects of the list and the later events are
    handed over; the failing object again at each of its events."""
    calls: list[str] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "a":
            raise RuntimeError("bug")

    kube = ScriptedApi([("list", ([obj("a", 1), obj("b", 2)], "10")),
                         ("watch", ([{"type": "MODIFIED", "object": obj("a", 11)},
                                     {"type": "MODIFIED", "object": obj("b", 12)}], None))])
    inf = Informer(kube.kube, NODES, handler, backoff=0.25)
    kube.informer = inf
    inf._stop = stop = RecordingStop()
    inf._run()
    assert kube.calls == ["list", "watch@10", "watch@12"] and stop.waits == []
    assert calls == ["a", "b", "a", "b"] and inf.handler_errors == 2 and inf.synced.is_set()
    assert inf.get("a") == obj("a", 11)  # the store holds what the API server sent


def test_the_transform_trims_what_is_stored_and_handed_over_from_lists_and_watches() -> None:
    def name_only(o: JSON) -> JSON:
        return {"metadata": {k: o["metadata"][k] for k in ("name", "resourceVersion")}}

    inf, _, _, _ = informer([
        ("list", ([obj("a", 1, spec={"big": "x" * 100})], "10")),
        ("watch", ([{"type": "ADDED", "object": obj("b", 11, status={"big": "y"})}], None)),
    ], transform=name_only)
    handed: list[JSON | None] = []
    inf._handler = lambda name, old, new: handed.append(new)
    inf._run()
    assert inf.get("a") == {"metadata": {"name": "a", "resourceVersion": "1"}}
    assert handed == [{"metadata": {"name": "a", "resourceVersion": "1"}},
                      {"metadata": {"name": "b", "resourceVersion": "11"}}]


def test_our_own_writes_are_stored_as_the_transform_makes_them_and_managed_fields_never_are() -> None:
    """The controller's informers drop ``metadata.managedFields`` (half a node's memory): from
    lists, watch events and our own writes alike (a patch's answer carries them too)."""
    def managed(name: str, rv: int) -> JSON:
        o = obj(name, rv)
        o["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
        return o

    inf, _, _, _ = informer([
        ("list", ([managed("a", 1)], "10")),
        ("watch", ([{"type": "MODIFIED", "object": managed("b", 11)}], None)),
    ], transform=without_managed_fields)
    inf._run()
    inf.upsert(managed("c", 12))
    for name in ("a", "b", "c"):
        stored = inf.get(name)
        assert stored is not None and "managedFields" not in stored["metadata"], stored
        assert stored["metadata"]["name"] == name
    assert without_managed_fields({"metadata": {"name": "x"}}) == {"metadata": {"name": "x"}}


def test_an_event_or_a_list_older_than_our_own_write_regresses_neither_the_store_nor_the_handler() -> None:
    """Our own write (upsert) is in the store before the watch tells of an earlier change: the
    store keeps ours and the handler is handed ours as the new version (the older one as the old),
    never the older object; the same for a list answered before our write. Before the fix the
    handler got the older object while the store kept ours."""
    script: list[tuple[str, Any]] = []
    inf, _, _, seen = informer(script)
    ours = obj("a", 12, spec={"ours": True})
    handed: list[JSON | None] = []
    record = inf._handler

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        handed.append(new)
        record(name, old, new)

    inf._handler = handler

    def first_watch() -> Iterator[JSON]:
        inf.upsert(ours)  # our write's answer, before the watch tells of version 11
        yield {"type": "MODIFIED", "object": obj("a", 11)}
        yield {"type": "MODIFIED", "object": obj("a", 12, spec={"ours": True})}  # the echo of our write
        inf.upsert(obj("a", 21))  # our next write, made after the list below was answered at 20

    script += [("list", ([obj("a", 1)], "10")),
               ("watch", (first_watch(), KubeError("too old", status=410))),
               ("list", ([obj("a", 20)], "20"))]
    inf._run()
    assert seen == [("a", None, "1"), ("a", "11", "12"), ("a", "12", "12"), ("a", "20", "21")]
    assert handed[1] is ours
    assert inf.get("a") == obj("a", 21)


def test_what_a_list_or_an_event_may_not_undo_of_our_own_writes_and_removals() -> None:
    """Versions decide, one rule: an object the list lacks stays when the store's version is
    newer than the list's (created after it was answered) and is deleted otherwise; an object we
    removed does not come back with a copy as old as the one removed (a lagging event, an older
    list), a newer one (created again) is taken in; a list whose version is not an integer
    settles nothing by versions: what it lacks is gone."""
    script: list[tuple[str, Any]] = []
    inf, _, _, seen = informer(script)

    def first_watch() -> Iterator[JSON]:
        inf.upsert(obj("new", 25))  # created (at 25) after the next list (at 20) was answered
        inf.remove("a")  # we deleted a (at version 1 in the store)
        yield {"type": "MODIFIED", "object": obj("a", 1)}  # a lagging event of what we removed: ignored
        inf.upsert(obj("a", 1))  # a late answer of a write made before the removal: refused
        assert inf.get("a") is None
        yield {"type": "ADDED", "object": obj("b", 12)}

    def second_watch() -> Iterator[JSON]:
        inf.remove("b")
        inf.upsert(obj("later", 35))
        inf.upsert(obj("gone", 25))
        yield from ()

    def third_watch() -> Iterator[JSON]:
        assert inf.get("b") is None  # the list at 30 predates our removal of b
        yield {"type": "DELETED", "object": obj("b", 31)}
        yield {"type": "ADDED", "object": obj("b", 40)}  # b created again: taken in

    script += [("list", ([obj("a", 1), obj("old", 2)], "10")),
               ("watch", (first_watch(), KubeError("too old", status=410))),
               ("list", ([obj("b", 12)], "20")),  # old was deleted before it, new was created after it
               ("watch", (second_watch(), KubeError("too old", status=410))),
               ("list", ([obj("b", 12), obj("new", 25)], "30")),  # later (35) is after it, gone (25) before
               ("watch", (third_watch(), KubeError("too old", status=410))),
               ("list", ([obj("b", 40)], "not-a-number"))]
    inf._run()
    assert ("a", None, "1") in seen and not [s for s in seen[1:] if s[0] == "a" and s[2] is not None]
    assert [s for s in seen if s[0] in ("new", "old")] == [
        ("old", None, "2"), ("old", "2", None), ("new", "25", "25"), ("new", "25", "25"), ("new", "25", None)]
    assert [s for s in seen if s[0] in ("later", "gone")] == [
        ("later", "35", "35"), ("gone", "25", None), ("later", "35", None)]
    assert [s for s in seen if s[0] == "b"] == [
        ("b", None, "12"), ("b", "12", "12"), ("b", None, None), ("b", None, "40"), ("b", "40", "40")]
    assert [o["metadata"]["name"] for o in inf.items()] == ["b"]


def test_a_transform_that_raises_keeps_the_stored_version_loses_no_deletion_and_never_relists() -> None:
    def picky(o: JSON) -> JSON:
        if o.get("bad"):
            raise KeyError("status")
        return o

    inf, kube, stop, seen = informer([
        ("list", ([obj("a", 1), obj("b", 2, bad=True), obj("c", 3)], "10")),
        ("watch", ([{"type": "MODIFIED", "object": obj("a", 11, bad=True)},
                    {"type": "MODIFIED", "object": obj("c", 12, bad=True)},
                    {"type": "DELETED", "object": obj("c", 13, bad=True)}], KubeError("too old", status=410))),
        ("list", ([obj("a", 11, bad=True), obj("b", 14)], "20")),
        ("watch", ([{"type": "MODIFIED", "object": obj("a", 21)}], None)),
    ], transform=picky)
    inf._run()
    assert kube.calls == ["list", "watch@10", "list", "watch@20", "watch@21"] and stop.waits == []
    assert seen == [("a", None, "1"), ("c", None, "3"),
                    ("c", "3", None),  # its deletion, whatever its last version was
                    ("b", None, "14"),  # taken in once it transforms; a kept as it was (1), not deleted
                    ("a", "1", "21")]
    assert inf.handler_errors == 4  # b and a in the first list and events, c's event, a in the second list
    assert inf.get("a") == obj("a", 21)


def test_a_late_deletion_of_an_older_object_leaves_the_name_created_again_in_the_store() -> None:
    """a is deleted (at 11) and created again (at 12) by us, our create's answer put into the store
    before the watch tells of the deletion: the deletion of the older a neither removes the newer a
    from the store nor is handed over as a deletion (the handler gets the newer a unchanged), and
    the newer a's own deletion later removes it. The same late deletion does not undo our removal
    of an object: a lagging copy of what we removed stays out. Before the fix the late deletion
    emptied the store until the watch's ADDED of the new a."""
    script: list[tuple[str, Any]] = []
    inf, _, _, seen = informer(script)
    present: list[bool] = []
    record = inf._handler

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        record(name, old, new)
        present.append(inf.get(name) is not None)

    inf._handler = handler
    again = {"metadata": {"name": "a", "resourceVersion": "12", "uid": "second"}}

    def watch() -> Iterator[JSON]:
        inf.upsert(again)  # our create of a, answered before the watch tells of the old a's deletion
        yield {"type": "DELETED", "object": obj("a", 11)}
        assert inf.get("a") is again
        yield {"type": "ADDED", "object": obj("a", 12)}  # the echo of our create
        yield {"type": "DELETED", "object": obj("a", 13)}  # the new a's own deletion
        assert inf.get("a") is None
        # b: we delete the b at 21, created after b's earlier deletion (20) that the watch tells late
        inf.upsert(obj("b", 21))
        inf.remove("b")
        yield {"type": "DELETED", "object": obj("b", 20)}  # the deletion of an older b
        yield {"type": "ADDED", "object": obj("b", 21)}  # a lagging copy of the b we removed: stays out
        assert inf.get("b") is None
        yield {"type": "DELETED", "object": obj("b", 22)}  # our deletion's own event
        yield {"type": "ADDED", "object": obj("b", 23)}  # b created again after it: taken in

    script += [("list", ([obj("a", 1), obj("b", 2)], "10")), ("watch", (watch(), None))]
    inf._run()
    assert [s for s in seen if s[0] == "a"] == [("a", None, "1"), ("a", "12", "12"), ("a", "12", "12"),
                                                ("a", "12", None)]
    assert present[:3] == [True, True, True]  # a was in the store at every change handed over
    assert [s for s in seen if s[0] == "b"] == [("b", None, "2"), ("b", None, None), ("b", None, None),
                                                ("b", None, "23")]
    assert [o["metadata"]["name"] for o in inf.items()] == ["b"] and inf.get("b") == obj("b", 23)


def test_a_throttled_list_or_watch_waits_at_least_the_servers_retry_after() -> None:
    inf, kube, stop, _ = informer([
        ("list", Throttled("too many requests", status=429, retry_after=4.0)),
        ("list", ([obj("a", 1)], "10")),
        ("watch", ([], Throttled("too many requests", status=429, retry_after=0.2))),
        ("list", ([obj("a", 1)], "20")),
    ])
    inf._run()
    assert kube.calls == ["list", "list", "watch@10", "list", "watch@20"]
    assert stop.waits == [4.0, 0.5]  # the server's delay when longer than the backoff, the backoff otherwise


def test_the_lists_by_reason_are_exported_in_both_forms_from_zero() -> None:
    from prometheus_client import CollectorRegistry

    from autoclusters.kube.informer_metrics import InformerMetrics, text_lines

    inf, _, _, _ = informer([
        ("list", ([obj("a", 1)], "10")),
        ("watch", ([], KubeError("too old", status=410))),
        ("list", ([obj("a", 1)], "20")),
    ])
    inf._run()
    text = "\n".join(text_lines([inf]))
    for reason, count in (("initial", 1), ("expired", 1), ("error", 0)):
        assert f'autoclusters_informer_lists_total{{informer="/api/v1/nodes",reason="{reason}"}} {count}' in text
    registry = CollectorRegistry()
    registry.register(InformerMetrics(lambda: (inf,)))
    got = {reason: registry.get_sample_value("autoclusters_informer_lists_total",
                                             {"informer": "/api/v1/nodes", "reason": reason})
           for reason in ("initial", "expired", "error")}
    assert got == {"initial": 1, "expired": 1, "error": 0}
    assert registry.get_sample_value("autoclusters_informer_handler_errors_total", {"informer": "/api/v1/nodes"}) == 0
