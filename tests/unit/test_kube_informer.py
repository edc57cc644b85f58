"""The informer's one error policy, step by step against a scripted API: resume after a watch
the server ended, list again at once on 410 Gone, list again after a doubling backoff on any
other error of the list or watch (reset once a list succeeds), a handler's error on one object
kept to that object; and its transform."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from autoclusters.kube.errors import Forbidden, KubeError, Unavailable
from autoclusters.kube.informer import Informer

JSON = dict[str, Any]


def obj(name: str, rv: int, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, **extra}


class ScriptedKube:
    """Answers list and watch calls from a script, in order; stops the informer when it runs out."""

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script = script
        self.calls: list[str] = []
        self.informer: Informer | None = None

    def _next(self, kind: str) -> Any:
        assert self.informer is not None
        if not self.script:
            self.informer.stop()
            return None
        want, step = self.script.pop(0)
        assert want == kind, f"expected a {want}, the informer made a {kind} (calls so far: {self.calls})"
        if isinstance(step, Exception):
            raise step
        return step

    def list_with_version(self, path: str, *, label_selector: str | None = None) -> tuple[list[JSON], str]:
        self.calls.append("list")
        step = self._next("list")
        return step if step is not None else ([], "0")

    def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
              timeout_seconds: int = 300) -> Iterator[JSON]:
        self.calls.append(f"watch@{resource_version}")
        step = self._next("watch")
        events, error = step if step is not None else ([], None)
        yield from events
        if error is not None:
            raise error


class RecordingStop(threading.Event):
    """The informer's stop event, recording each backoff wait instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return self.is_set()


def informer(script: list[tuple[str, Any]], **kw: Any) -> tuple[Informer, ScriptedKube, RecordingStop, list[Any]]:
    kube = ScriptedKube(script)
    seen: list[tuple[str, str | None, str | None]] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        rv = lambda o: None if o is None else o["metadata"]["resourceVersion"]  # noqa: E731
        seen.append((name, rv(old), rv(new)))

    inf = Informer(kube, "/api/v1/nodes", handler, backoff=0.5, max_backoff=1.0, **kw)  # type: ignore[arg-type]
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


def test_a_handler_that_raises_on_one_object_is_that_objects_error_alone() -> None:
    """No relist and no backoff: the other objects of the list and the later events are
    handed over; the failing object again at each of its events."""
    calls: list[str] = []

    def handler(name: str, old: JSON | None, new: JSON | None) -> None:
        calls.append(name)
        if name == "a":
            raise RuntimeError("bug")

    kube = ScriptedKube([("list", ([obj("a", 1), obj("b", 2)], "10")),
                         ("watch", ([{"type": "MODIFIED", "object": obj("a", 11)},
                                     {"type": "MODIFIED", "object": obj("b", 12)}], None))])
    inf = Informer(kube, "/api/v1/nodes", handler, backoff=0.25)  # type: ignore[arg-type]
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
