"""A fake Kubernetes API server behind the transport ``Kube`` takes (``param_serialize`` /
``call_api``), so the controller's real client code runs against it in unit tests.

What it does, as the API server does it: a store of objects by resource and name; one
resourceVersion counter for the whole store, bumped by every change (a no-op write changes
nothing and bumps nothing); ``metadata.generation`` bumped when anything but metadata and
status changes; the ``status`` subresource (a write of the object keeps its status, a write
of ``/status`` keeps everything else; a custom resource's status is dropped on create);
merge patch (RFC 7386), JSON patch (RFC 6902, through the ``jsonpatch`` library: its ``test``
failing answers 422 as the API server does), strategic merge for the lists the code patches
(conditions and addresses by ``type``); a stale ``metadata.resourceVersion`` in a PUT or a
patch answers 409, a missing object 404, a create of an existing name 409; label and field
selectors on lists; evictions; finalizers (a DELETE of an object that has some only sets its
``deletionTimestamp``: the test removes it, with ``remove``, as the finalizer's owner would);
watches (a stream of the events after a resourceVersion, 410 once that history is compacted
away). Every request is logged as ``(verb, path)`` with its query and body, so tests count
what a piece of code asked.

What a test makes the server do, through two small hooks: ``fail_next(verb, path, status)``
answers the next matching requests with an error (before acting, or after it with ``lands``:
the write done, its answer lost, as when a connection is cut); ``on_request(verb, path, fn)``
runs ``fn`` before each matching request is served (another writer racing it, a slow
answer held on an event, an admission webhook refusing it by raising ``ApiError``). And
``answer_next(verb, path, Answer(...))`` scripts the server's next answer outright, for the
tests of a client's policy over an exact sequence of answers (a list at a given version, a
watch's events and how it ends, a flow-control 429 with its Retry-After).

This is the one fake of the Kubernetes API in the unit tests: a test that needs the API
gives the real ``Kube`` client this server (``FakeApi().kube()``); the objects it holds come
from ``tests/unit/builders.py``.

Not here: admission, RBAC, defaulting, validation beyond what the tests need.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

try:
    import jsonpatch
except ImportError as e:  # a venv made before requirements.txt listed it
    raise ImportError("the fake API server needs jsonpatch: run `make venv` (requirements.txt lists it)") from e

from autoclusters.kube import Kube
from autoclusters.kube.errors import PATCH_DID_NOT_APPLY

JSON = dict[str, Any]

# Resources whose status is a subresource (the object's own writes keep it; /status writes only it).
STATUS_SUBRESOURCE = frozenset({"nodes", "pods", "remediations", "gpunodepools"})
# Custom resources: the API server drops .status on create when the status subresource is on.
CUSTOM_WITH_STATUS = frozenset({"remediations", "gpunodepools"})
# Strategic merge: list fields merged by a key (the rest are replaced, as for a merge patch).
MERGE_KEYS = {"conditions": "type", "addresses": "type"}


@dataclass(frozen=True)
class Request:
    verb: str  # GET, LIST, WATCH, POST, PUT, PATCH, DELETE
    path: str
    query: dict[str, str]
    body: Any
    content_type: str

    @property
    def resource(self) -> str:
        """``plural`` or ``plural/subresource``: what benchmarks and tests count by."""
        r = _parse(self.path)
        return f"{r.plural}/{r.sub}" if r.sub else r.plural


@dataclass(frozen=True)
class _Ref:
    prefix: str  # /api/v1 or /apis/<group>/<version>
    namespace: str
    plural: str
    name: str
    sub: str

    @property
    def collection(self) -> tuple[str, str]:
        return self.prefix, self.plural


def _parse(path: str) -> _Ref:
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        prefix, rest = "/" + "/".join(parts[:2]), parts[2:]
    else:
        prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
    ns = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    plural = rest[0] if rest else ""  # "": the group-version's discovery document
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return _Ref(prefix, ns, plural, name, sub)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(target: Any, patch: Any, key: str = "") -> Any:
    """A merge patch whose known lists (``MERGE_KEYS``) merge element by element."""
    if isinstance(patch, list) and key in MERGE_KEYS and isinstance(target, list):
        mk = MERGE_KEYS[key]
        merged = copy.deepcopy(target)
        for item in patch:
            for i, old in enumerate(merged):
                if isinstance(old, dict) and isinstance(item, dict) and old.get(mk) == item.get(mk):
                    merged[i] = strategic_merge(old, item)
                    break
            else:
                merged.append(copy.deepcopy(item))
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out: JSON = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = strategic_merge(out.get(k), v, k)
    return out


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("==" if "==" in term else "=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_matches(selector: str, obj: JSON) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        path, want = term.split("=", 1)
        value: Any = obj
        for part in path.split("."):
            value = (value or {}).get(part) if isinstance(value, dict) else None
        if str(value or "") != want:
            return False
    return True


class _Response:
    """What ``Kube.request`` reads of the kubernetes client's response."""

    def __init__(self, status: int, body: Any = None, stream: Iterator[bytes] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self.reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 410: "Gone",
                       422: "Unprocessable Entity", 429: "Too Many Requests", 403: "Forbidden",
                       503: "Service Unavailable"}.get(status, "")
        self.data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        self.response = self
        self._stream = stream

    def read(self) -> bytes:
        return self.data

    def stream(self, amt: int = 65536, decode_content: bool = True) -> Iterator[bytes]:
        assert self._stream is not None
        yield from self._stream

    def release_conn(self) -> None:
        pass


class ApiError(Exception):
    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason or {403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
                                 422: "Invalid", 429: "TooManyRequests", 503: "ServiceUnavailable"}.get(status, "")


@dataclass
class Answer:
    """A scripted answer to one request, given in place of the store's (``FakeApi.answer_next``):
    a status and body (JSON, or bytes sent as they are: flow control's 429 is plain text), or for
    a watch its events, each sent when the client reads on (a generator may act in between)."""

    status: int = 200
    body: Any = None
    events: Iterable[JSON] = ()
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Failure:
    verb: str
    path: str
    status: int
    message: str
    times: int
    lands: bool


def _matches(req: Request, verb: str, path: str) -> bool:
    """``verb`` is the request's (``*``: any); ``path`` is its path or a collection above it."""
    return verb in ("*", req.verb) and (req.path == path or req.path.startswith(path.rstrip("/") + "/"))


@dataclass
class _Watch:
    prefix: str
    plural: str
    namespace: str
    selector: str
    cursor: int  # events up to here were handed over (and, once asked for the next one, handled)
    idle: bool = False  # waiting for new events


@dataclass
class FakeApi:
    """The store and the API's rules. ``Kube(FakeApi(...).client())`` talks to it."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    objects: dict[tuple[str, str], dict[tuple[str, str], JSON]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    rv: int = 100
    compacted: int = 0  # watches from at or below this resourceVersion get 410 Gone
    # Called before each request is served; may raise ApiError to fail it (a race, an outage).
    before: list[Callable[[Request], None]] = field(default_factory=list)
    _failures: list[_Failure] = field(default_factory=list)
    _answers: list[tuple[str, str, Answer]] = field(default_factory=list)
    _after: list[Callable[[Request], None]] = field(default_factory=list)
    # Group-versions that are not installed: their discovery document and objects answer 404.
    unserved: set[str] = field(default_factory=set)
    # Evictions refused (429) for these "ns/name" pods, as a PodDisruptionBudget would.
    pdb_blocked: set[str] = field(default_factory=set)
    _events: list[tuple[int, str, str, str, JSON]] = field(default_factory=list)  # rv, prefix, plural, type, obj
    _watches: list[_Watch] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False
    # settle() first waits until this many watches are open (an informer opens its watch just
    # after its list: without this a settle() in between would see no watcher to wait for)
    min_watchers: int = 0

    def fail_next(self, verb: str, path: str, status: int = 503, message: str = "", *, times: int = 1,
                  lands: bool = False) -> None:
        """The next ``times`` requests ``verb`` (``*``: any) on ``path`` (or below it) answer
        ``status``. ``lands``: the request is served first and only its answer is the error."""
        self._failures.append(_Failure(verb, path, status, message or f"injected HTTP {status}", times, lands))

    def answer_next(self, verb: str, path: str, answer: Answer) -> None:
        """The next request ``verb`` on ``path`` (or below it) gets ``answer``, not the store's;
        several answers given for the same requests are used in the order given."""
        self._answers.append((verb, path, answer))

    @property
    def scripted(self) -> int:
        """How many scripted answers are still to be given."""
        return len(self._answers)

    def on_request(self, verb: str, path: str, fn: Callable[[Request], object], *, after: bool = False) -> None:
        """Runs ``fn`` before each request ``verb`` (``*``: any) on ``path`` (or below it) is
        served; ``fn`` may change the store (``edit``), wait, or raise ``ApiError`` to refuse it.
        ``after``: once the request is served, before its answer reaches the client (a change
        that comes just after the server's snapshot: a list's, a write's)."""
        def hook(req: Request) -> None:
            if _matches(req, verb, path):
                fn(req)

        (self._after if after else self.before).append(hook)

    def client(self) -> FakeApiClient:
        return FakeApiClient(self)

    def kube(self) -> Kube:
        return Kube(self.client())

    # --- direct access for tests (not requests: nothing is logged) ----------------------
    def put(self, path: str, obj: JSON) -> JSON:
        """Creates or replaces ``obj`` at its collection ``path`` as someone else would."""
        ref = _parse(path)
        obj = copy.deepcopy(obj)
        with self._cond:
            store = self.objects.setdefault(ref.collection, {})
            key = (obj["metadata"].get("namespace", ref.namespace), obj["metadata"]["name"])
            old = store.get(key)
            if ref.namespace:
                obj["metadata"]["namespace"] = ref.namespace
            self._stamp(obj, old)
            store[key] = obj
            self._record(ref.prefix, ref.plural, "MODIFIED" if old else "ADDED", obj)
            return copy.deepcopy(obj)

    def edit(self, path: str, change: Callable[[JSON], object]) -> JSON:
        """Changes the object at ``path`` in place, as another writer would (rv bumped, watchers told)."""
        ref = _parse(path)
        with self._cond:
            store = self.objects[ref.collection]
            obj = copy.deepcopy(store[(ref.namespace, ref.name)])
            change(obj)
            self._stamp(obj, store[(ref.namespace, ref.name)])
            store[(ref.namespace, ref.name)] = obj
            self._record(ref.prefix, ref.plural, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def remove(self, path: str) -> None:
        ref = _parse(path)
        with self._cond:
            obj = self.objects.get(ref.collection, {}).pop((ref.namespace, ref.name))
            self.rv += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
            self._record(ref.prefix, ref.plural, "DELETED", obj)

    def read(self, path: str) -> JSON | None:
        ref = _parse(path)
        with self._cond:
            obj = self.objects.get(ref.collection, {}).get((ref.namespace, ref.name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, path: str) -> list[JSON]:
        ref = _parse(path + "/x")
        with self._cond:
            return [copy.deepcopy(o) for (ns, _), o in sorted(self.objects.get(ref.collection, {}).items())
                    if not ref.namespace or ns == ref.namespace]

    def changes(self, path: str) -> list[tuple[str, JSON]]:
        """What happened to the collection at ``path``, in order: ``(ADDED|MODIFIED|DELETED, object)``
        (the history a watch from the start would see; forgotten by ``compact``)."""
        ref = _parse(path + "/x")
        with self._cond:
            return [(kind, copy.deepcopy(obj)) for _, prefix, plural, kind, obj in self._events
                    if (prefix, plural) == ref.collection
                    and (not ref.namespace or obj["metadata"].get("namespace") == ref.namespace)]

    def compact(self) -> None:
        """Forget the event history (etcd compaction): older watches get 410 Gone."""
        with self._cond:
            self.compacted = self.rv
            self._events.clear()

    def close(self) -> None:
        """Ends every watch stream (test teardown)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def settle(self, timeout: float = 5.0) -> None:
        """Waits until every open watch has handed over (and its reader handled) every event."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._watches) < self.min_watchers or not all(
                    w.idle and w.cursor >= self.rv for w in self._watches):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("watchers did not catch up")
                self._cond.wait(min(left, 0.01))

    def watching(self, plural: str) -> int:
        with self._cond:
            return sum(1 for w in self._watches if w.plural == plural)

    # --- the request log --------------------------------------------------------------------
    def counts(self, *, skip_watch: bool = True) -> Counter[tuple[str, str]]:
        """(verb, resource) -> number of requests; watches left out unless asked."""
        return Counter((r.verb, r.resource) for r in self.requests if not (skip_watch and r.verb == "WATCH"))

    def total(self, *, skip_watch: bool = True) -> int:
        return sum(self.counts(skip_watch=skip_watch).values())

    # --- serving ------------------------------------------------------------------------------
    def _stamp(self, obj: JSON, old: JSON | None) -> None:
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        if old is None:
            meta.setdefault("uid", f"uid-{self.rv}")
            meta.setdefault("creationTimestamp", self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["generation"] = 1
        else:
            meta["uid"] = old["metadata"].get("uid")
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            spec_changed = {k: v for k, v in obj.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")}
            meta["generation"] = int(old["metadata"].get("generation", 1)) + (1 if spec_changed else 0)

    def _record(self, prefix: str, plural: str, kind: str, obj: JSON) -> None:
        self._events.append((self.rv, prefix, plural, kind, copy.deepcopy(obj)))
        self._cond.notify_all()

    def serve(self, req: Request) -> _Response:
        self.requests.append(req)
        try:
            for hook in list(self.before):
                hook(req)
            failure = self._take_failure(req)
            if failure is not None and not failure.lands:
                raise ApiError(failure.status, failure.message)
            scripted = self._take_answer(req)
            if scripted is not None:
                return self._scripted(req, scripted)
            resp = self._serve(req)
            for hook in list(self._after):
                hook(req)
            if failure is not None:
                raise ApiError(failure.status, failure.message)
            return resp
        except ApiError as e:
            return _Response(e.status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "message": str(e), "reason": e.reason, "code": e.status})

    def _take_failure(self, req: Request) -> _Failure | None:
        with self._cond:
            for f in self._failures:
                if f.times > 0 and _matches(req, f.verb, f.path):
                    f.times -= 1
                    return f
        return None

    def _take_answer(self, req: Request) -> Answer | None:
        with self._cond:
            for i, (verb, path, answer) in enumerate(self._answers):
                if _matches(req, verb, path):
                    del self._answers[i]
                    return answer
        return None

    @staticmethod
    def _scripted(req: Request, answer: Answer) -> _Response:
        if req.verb == "WATCH" and answer.status < 300:
            return _Response(answer.status, stream=(json.dumps(e).encode() + b"\n" for e in answer.events),
                             headers=answer.headers)
        return _Response(answer.status, answer.body, headers=answer.headers)

    def _serve(self, req: Request) -> _Response:
        parts = [p for p in req.path.split("/") if p]
        if parts[0] == "apis" and "/".join(parts[1:3]) in self.unserved:
            raise ApiError(404, "the server could not find the requested resource")
        if parts[0] == "apis" and len(parts) == 3 and req.verb in ("GET", "LIST"):  # discovery of a group-version
            with self._cond:
                plurals = sorted({plural for (prefix, plural) in self.objects if prefix == req.path.rstrip("/")})
            return _Response(200, {"kind": "APIResourceList", "groupVersion": "/".join(parts[1:3]),
                                   "resources": [{"name": p} for p in plurals]})
        ref = _parse(req.path)
        if req.verb == "WATCH":
            return self._watch(ref, req.query)
        with self._cond:
            store = self.objects.setdefault(ref.collection, {})
            key = (ref.namespace, ref.name)
            current = store.get(key)
            what = f'{ref.plural} "{ref.name}"'
            if req.verb == "LIST":
                items = [copy.deepcopy(o) for (ns, _), o in sorted(store.items())
                         if (not ref.namespace or ns == ref.namespace)
                         and _selector_matches(req.query.get("labelSelector", ""),
                                               o["metadata"].get("labels") or {})
                         and _field_matches(req.query.get("fieldSelector", ""), o)]
                return _Response(200, {"kind": "List", "items": items,
                                       "metadata": {"resourceVersion": str(self.rv)}})
            if req.verb == "POST" and ref.sub == "eviction":
                if current is None:
                    raise ApiError(404, f"{what} not found")
                if f"{ref.namespace}/{ref.name}" in self.pdb_blocked:
                    raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
                del store[key]
                self.rv += 1
                self._record(ref.prefix, ref.plural, "DELETED",
                             {**current, "metadata": {**current["metadata"], "resourceVersion": str(self.rv)}})
                return _Response(201, {"kind": "Status", "status": "Success"})
            if req.verb == "POST":
                obj = copy.deepcopy(req.body)
                name = obj["metadata"]["name"]
                if (ref.namespace, name) in store:
                    raise ApiError(409, f'{ref.plural} "{name}" already exists', "AlreadyExists")
                if ref.namespace:
                    obj["metadata"]["namespace"] = ref.namespace
                if ref.plural in CUSTOM_WITH_STATUS:
                    obj.pop("status", None)
                obj["metadata"].pop("resourceVersion", None)
                self._stamp(obj, None)
                store[(ref.namespace, name)] = obj
                self._record(ref.prefix, ref.plural, "ADDED", obj)
                return _Response(201, obj)
            if current is None:
                raise ApiError(404, f"{what} not found")
            if req.verb == "GET":
                return _Response(200, copy.deepcopy(current))
            if req.verb == "DELETE" and current["metadata"].get("finalizers"):
                if current["metadata"].get("deletionTimestamp"):
                    return _Response(200, copy.deepcopy(current))  # already going
                going = copy.deepcopy(current)
                going["metadata"]["deletionTimestamp"] = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
                self._stamp(going, current)
                store[key] = going
                self._record(ref.prefix, ref.plural, "MODIFIED", going)
                return _Response(200, copy.deepcopy(going))
            if req.verb == "DELETE":
                del store[key]
                self.rv += 1
                gone = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self.rv)}}
                self._record(ref.prefix, ref.plural, "DELETED", gone)
                return _Response(200, gone)
            if req.verb == "PUT":
                wanted = (req.body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != current["metadata"]["resourceVersion"]:
                    raise ApiError(409, f"Operation cannot be fulfilled on {what}: the object has been "
                                        "modified; please apply your changes to the latest version and try again")
                new = copy.deepcopy(req.body)
            elif req.verb == "PATCH":
                new = self._patch(current, req, what)
            else:
                raise ApiError(405, f"{req.verb} not allowed")
            new = self._subresource(ref, current, new)
            if new == current:
                return _Response(200, copy.deepcopy(current))  # a no-op: nothing stored, no new version
            new["metadata"].pop("resourceVersion", None)
            self._stamp(new, current)
            store[key] = new
            self._record(ref.prefix, ref.plural, "MODIFIED", new)
            return _Response(200, copy.deepcopy(new))

    def _patch(self, current: JSON, req: Request, what: str) -> JSON:
        if req.content_type == "application/json-patch+json":
            try:
                return jsonpatch.apply_patch(current, req.body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                # the API server's generic 422 for a patch that does not apply (a failed test, a
                # path that is gone): the patch library's own words are not passed on
                raise ApiError(422, PATCH_DID_NOT_APPLY) from e
        wanted = ((req.body or {}).get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(409, f"Operation cannot be fulfilled on {what}: the object has been modified; "
                                "please apply your changes to the latest version and try again")
        if req.content_type == "application/strategic-merge-patch+json":
            return strategic_merge(current, req.body)
        return merge_patch(current, req.body)

    @staticmethod
    def _subresource(ref: _Ref, current: JSON, new: JSON) -> JSON:
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if ref.plural not in STATUS_SUBRESOURCE:
            return new
        if ref.sub == "status":
            return {**current, "status": new.get("status")} if "status" in new else {
                k: v for k, v in current.items() if k != "status"}
        out = {**new}
        if "status" in current:
            out["status"] = current["status"]
        else:
            out.pop("status", None)
        return out

    def _watch(self, ref: _Ref, query: dict[str, str]) -> _Response:
        since = int(query.get("resourceVersion") or 0)
        with self._cond:
            if since and since < self.compacted:
                gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                    "message": f"too old resource version: {since}"}}
                return _Response(200, stream=iter([json.dumps(gone).encode() + b"\n"]))
            w = _Watch(ref.prefix, ref.plural, ref.namespace, query.get("labelSelector", ""), since or self.rv)
            self._watches.append(w)
        timeout = float(query.get("timeoutSeconds") or 300)
        return _Response(200, stream=self._stream(w, time.monotonic() + timeout))

    def _stream(self, w: _Watch, deadline: float) -> Iterator[bytes]:
        try:
            while True:
                with self._cond:
                    event = None
                    while event is None:
                        if self.closed or time.monotonic() >= deadline:
                            return
                        for rv, prefix, plural, kind, obj in self._events:
                            if rv <= w.cursor or prefix != w.prefix or plural != w.plural:
                                continue
                            if w.namespace and obj["metadata"].get("namespace") != w.namespace:
                                continue
                            if kind != "DELETED" and not _selector_matches(
                                    w.selector, obj["metadata"].get("labels") or {}):
                                continue
                            event = (rv, kind, obj)
                            break
                        if event is None:
                            w.cursor = self.rv
                            w.idle = True
                            self._cond.notify_all()
                            self._cond.wait(0.05)
                    w.idle = False
                rv, kind, obj = event
                yield json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                with self._cond:  # the reader asked for more: the event above is handled
                    w.cursor = max(w.cursor, rv)
        finally:
            with self._cond:
                if w in self._watches:
                    self._watches.remove(w)
                self._cond.notify_all()


class FakeApiClient:
    """The transport ``Kube`` calls: the kubernetes client's ``param_serialize``/``call_api``."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.configuration = type("Configuration", (), {"host": "https://fake-apiserver"})()
        self.user_agent = ""

    def param_serialize(self, *, method: str, resource_path: str, query_params: list[tuple[str, Any]] | None,
                        header_params: dict[str, str], body: Any, auth_settings: list[str]
                        ) -> tuple[str, str, dict[str, str], bytes | None, None]:
        url = resource_path
        if query_params:
            from urllib.parse import urlencode

            url += "?" + urlencode(query_params)
        payload = None if body is None else json.dumps(body).encode()  # only what JSON can carry goes
        return method, url, dict(header_params), payload, None

    def call_api(self, method: str, url: str, *, header_params: dict[str, str], body: bytes | None,
                 _request_timeout: Any = None) -> _Response:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        verb = method
        if method == "GET":
            if query.get("watch") == "true":
                verb = "WATCH"
            elif _parse(parts.path).name == "":
                verb = "LIST"
        return self.api.serve(Request(verb, parts.path, query, None if body is None else json.loads(body),
                                      header_params.get("Content-Type", "")))
