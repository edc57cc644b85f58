"""Events about our objects (nodes, pools, pods), written so that every reader lists them
in the order they happened in, with repeats aggregated.

Readers sort events differently: ``kubectl describe`` by ``lastTimestamp`` alone (second
resolution; equal ones keep the order the API lists them in, which is by name, and only
while there are few of them), ``kubectl events`` by ``series.lastObservedTime``, else
``lastTimestamp``, else ``eventTime``; alert rules and exporters read ``source.component`` or
``reportingComponent``. So each event carries, from one stamp taken when it is emitted (not
when it is sent):

- ``eventTime`` with microseconds, strictly increasing per recorder (what the current
  client-go recorder writes; ``kubectl describe`` shows the event's age from it);
- ``firstTimestamp`` / ``lastTimestamp`` in seconds, strictly increasing per object: an
  event emitted in the same second as the object's previous one is stamped one second after
  it, so no two of an object's events ever tie, whatever the reader's sort (a burst of steps
  is recorded there at most a few seconds late; ``eventTime`` keeps the true time);
- a name ``<object>.<eventTime in hex nanoseconds>``, as client-go names them, so the API's
  own listing is in time order too;
- ``source.component`` and ``reportingComponent``: the configured event source (the core
  API accepts both; ``events.k8s.io/v1`` would refuse the first, which older tools read).

A repeat of the same (object, reason, message) within the aggregation window raises
``count`` and ``series.count`` and moves ``lastTimestamp`` / ``series.lastObservedTime`` with
a merge patch instead of creating a new Event, so a held repair that is re-announced does not
flood ``kubectl describe``. Events of cluster-scoped objects live in the ``default``
namespace, where ``kubectl describe node`` looks for them; events of a pod live in the pod's
namespace.
"""

from __future__ import annotations

import logging
import queue
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from autoclusters.clock import Clock, utc_iso, utc_iso_micro
from autoclusters.kube.client import Kube
from autoclusters.kube.errors import Conflict, Forbidden, KubeError, NotFound, TooManyRequests, Unavailable
from autoclusters.names import event_source_error

log = logging.getLogger(__name__)

EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024  # the API server's limit for an event's message (note)
MAX_INSTANCE = 128

def _passing(e: KubeError) -> bool:
    """A failure that a later try may not meet: the API server unreachable, restarting, or busy."""
    return isinstance(e, Unavailable | TooManyRequests)


# A 403 just after an API server (re)starts is its authorizer not having read the RBAC objects yet
# (kube-apiserver serves before its RBAC informers are synced: every request is refused for a
# second or two). It is tried again for this long only, since a 403 that lasts is a missing
# permission, and the object's later events wait behind it.
FORBIDDEN_RETRY_SECONDS = 15.0


def event_name(obj: str, at: datetime) -> str:
    """``<object>.<hex nanoseconds>``: names that list in time order (client-go's scheme)."""
    nanos = int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000
    return f"{obj}.{nanos:x}"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    api_version: str = "v1"
    uid: str = ""
    namespace: str = ""  # only for namespaced objects (a pod)

    def as_dict(self) -> dict[str, Any]:
        ref = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.uid:
            ref["uid"] = self.uid
        if self.namespace:
            ref["namespace"] = self.namespace
        return ref

    @property
    def event_namespace(self) -> str:
        return self.namespace or EVENT_NAMESPACE


@dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    reason: str
    message: str
    warning: bool
    at: datetime  # eventTime: microseconds, strictly increasing per recorder
    seen: datetime  # first/lastTimestamp: whole seconds, strictly increasing per object


class EventRecorder:
    """Writes events; never raises (an event that cannot be written is logged, not fatal).

    ``source`` is the event source (``source.component`` and ``reportingComponent``);
    ``instance`` names this replica (``reportingInstance``, default: the host name).

    With ``background=True``, ``emit`` only stamps and queues the event and ``senders``
    threads write the queues, so a reconcile never waits on an event write (as client-go's
    broadcaster does). Each object's events go to one sender, always the same, so they are
    written in the order they were emitted and repeats of one event aggregate; events of
    different objects are written side by side (one sender wrote about 9 events a second at
    a busy API server's 70 ms per POST, and at 250 simultaneous repairs the events trailed
    the repairs by up to a minute). The queues are bounded; an event that does not fit is
    logged and dropped. A sender whose write fails for a passing reason (the API server
    unreachable or restarting, a 5xx, a 429) tries the same event again, waiting ``retry_first``
    seconds doubling to ``retry_max``, for up to ``retry_seconds`` (client-go's broadcaster tries
    12 times over two minutes), and a 403 for up to ``forbidden_seconds`` (a restarted API server
    refuses everything until its authorizer has read the RBAC objects; client-go drops such an
    event): an API server that restarts mid-repair costs no event, and the
    object's later events wait behind it, so the order holds. A create whose answer was lost may
    have landed: its retry finding the event's own name taken is that write, not a second event.
    Written inline (``background=False``), an event is tried once: the caller never waits.
    """

    def __init__(self, kube: Kube, clock: Clock, source: str, *, instance: str = "",
                 aggregate_seconds: float = 600, max_cache: int = 4096, background: bool = False,
                 max_queue: int = 10000, senders: int = 1, retry_seconds: float = 120, retry_first: float = 0.5,
                 retry_max: float = 10, forbidden_seconds: float = FORBIDDEN_RETRY_SECONDS) -> None:
        why = event_source_error(source)
        if why:
            raise ValueError(why)
        self._kube = kube
        self._clock = clock
        self.source = source
        self.instance = (instance or socket.gethostname() or source)[:MAX_INSTANCE]
        self._aggregate = aggregate_seconds
        self._max = max_cache
        self._seen: dict[tuple[str, str, str, str, str], tuple[str, int, float]] = {}
        self._lock = threading.Lock()
        self._last: datetime | None = None
        self._last_second: dict[tuple[str, str, str], datetime] = {}
        self._queues: list[queue.Queue[_Pending]] = []
        self._retry = (retry_seconds, retry_first, retry_max)
        self._forbidden_seconds = min(forbidden_seconds, retry_seconds)
        if background:
            if senders < 1:
                raise ValueError(f"senders must be at least 1, not {senders}")
            for i in range(senders):
                q: queue.Queue[_Pending] = queue.Queue(max(1, max_queue // senders))
                self._queues.append(q)
                threading.Thread(target=self._send_loop, args=(q,), name=f"events-{i}", daemon=True).start()

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        pending = _Pending(ref, reason, message, warning, *self._stamp(ref))
        if not self._queues:
            self._write(pending)
            return
        try:
            self._queues[self.sender_of(ref)].put_nowait(pending)
        except queue.Full:
            log.warning("event queue full: %s on %s %s dropped", reason, ref.kind, ref.name)

    def sender_of(self, ref: ObjectRef) -> int:
        """The sender that writes this object's events (stable within the process)."""
        return hash((ref.kind, ref.namespace, ref.name)) % len(self._queues) if self._queues else 0

    def flush(self, timeout: float = 5.0) -> None:
        """Waits (bounded) until queued events are written; for a clean shutdown."""
        deadline = time.monotonic() + timeout
        while any(q.unfinished_tasks for q in self._queues) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _stamp(self, ref: ObjectRef) -> tuple[datetime, datetime]:
        """Now, later than the previous stamp by at least a microsecond; and its second, later
        than the previous second stamped on the same object."""
        with self._lock:
            now = self._clock.now()
            if self._last is not None and now <= self._last:
                now = self._last + timedelta(microseconds=1)
            self._last = now
            key = (ref.kind, ref.namespace, ref.name)
            second = now.replace(microsecond=0)
            prev = self._last_second.get(key)
            if prev is not None and second <= prev:
                second = prev + timedelta(seconds=1)
            if len(self._last_second) >= self._max:
                self._last_second.clear()
            self._last_second[key] = second
            return now, second

    def _send_loop(self, q: queue.Queue[_Pending]) -> None:
        while True:
            pending = q.get()
            try:
                self._write(pending, retry=True)
            finally:
                q.task_done()

    def _write(self, p: _Pending, retry: bool = False) -> None:
        """Writes one event; with ``retry``, again after a passing failure (see the class)."""
        total, delay, most = self._retry
        start = self._clock.monotonic()
        again = False
        while True:
            try:
                self._send(p, again)
                return
            except KubeError as e:
                window = total if _passing(e) else self._forbidden_seconds if isinstance(e, Forbidden) else None
                if not (retry and window is not None and self._clock.monotonic() + delay <= start + window):
                    log.warning("event %s on %s %s not written: %s", p.reason, p.ref.kind, p.ref.name, e)
                    return
                log.info("event %s on %s %s not written yet (%s); trying again in %.1fs", p.reason, p.ref.kind,
                         p.ref.name, e, delay)
            self._clock.sleep(delay)
            delay = min(delay * 2, most)
            again = True

    def _send(self, p: _Pending, again: bool) -> None:
        """One try; ``again``: an earlier try of this event failed, perhaps after its create landed."""
        key = (p.ref.kind, p.ref.event_namespace, p.ref.name, p.reason, p.message)
        ns = p.ref.event_namespace
        mono = self._clock.monotonic()
        with self._lock:
            prev = self._seen.get(key)
        if prev and mono - prev[2] < self._aggregate:
            name, count, first = prev
            try:
                self._kube.patch(f"/api/v1/namespaces/{ns}/events/{name}", {
                    "count": count + 1, "lastTimestamp": utc_iso(p.seen),
                    "series": {"count": count + 1, "lastObservedTime": utc_iso_micro(p.at)}})
                self._remember(key, name, count + 1, first)
                return
            except NotFound:
                pass
        name = event_name(p.ref.name, p.at)
        try:
            self._kube.create(f"/api/v1/namespaces/{ns}/events", self.body(name, p))
        except Conflict:
            if not again or not self._is_ours(ns, name, p):  # not our earlier try's: another writer's, same µs
                name = f"{name}{secrets.token_hex(2)}"
                self._kube.create(f"/api/v1/namespaces/{ns}/events", self.body(name, p))
        self._remember(key, name, 1, mono)

    def _is_ours(self, ns: str, name: str, p: _Pending) -> bool:
        """The event of that name is this one (an earlier try's create landed, its answer lost)."""
        try:
            got = self._kube.get(f"/api/v1/namespaces/{ns}/events/{name}")
        except NotFound:
            return False
        return bool(got.get("reason") == p.reason and got.get("reportingInstance") == self.instance
                    and got.get("eventTime") == utc_iso_micro(p.at))

    def body(self, name: str, p: _Pending) -> dict[str, Any]:
        seen = utc_iso(p.seen)  # first and last: formatted once
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": p.ref.event_namespace},
            "involvedObject": p.ref.as_dict(),
            "reason": p.reason, "message": p.message[:MAX_MESSAGE],
            "type": "Warning" if p.warning else "Normal",
            "eventTime": utc_iso_micro(p.at),
            "firstTimestamp": seen, "lastTimestamp": seen, "count": 1,
            "action": p.reason,
            "source": {"component": self.source},
            "reportingComponent": self.source,
            "reportingInstance": self.instance,
        }

    def _remember(self, key: tuple[str, str, str, str, str], name: str, count: int, first: float) -> None:
        with self._lock:
            if len(self._seen) >= self._max:
                self._seen.clear()
            self._seen[key] = (name, count, first)
