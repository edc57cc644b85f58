"""core/v1 Events about our objects (nodes, pools), aggregated like kubelet's recorder.

A repeat of the same (object, reason, message) within the aggregation window bumps
``count`` and ``lastTimestamp`` on the existing Event with a merge patch instead of
creating a new one, so a held repair that is re-announced does not flood ``kubectl
describe``. Events of cluster-scoped objects live in the ``default`` namespace, where
``kubectl describe node`` looks for them.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoclusters.clock import Clock, utc_iso
from autoclusters.kube.client import Kube
from autoclusters.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

EVENT_NAMESPACE = "default"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    api_version: str = "v1"
    uid: str = ""

    def as_dict(self) -> dict[str, Any]:
        ref = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.uid:
            ref["uid"] = self.uid
        return ref


class EventRecorder:
    """Writes events; never raises (an event that cannot be written is logged, not fatal).

    With ``senders`` > 0, ``emit`` only queues the event and that many threads write them,
    so a reconcile never waits on an event write (as client-go's broadcaster does); the
    queue is bounded and an event that does not fit is logged and dropped.
    """

    def __init__(self, kube: Kube, clock: Clock, component: str, *, aggregate_seconds: float = 600,
                 max_cache: int = 4096, senders: int = 0, max_queue: int = 10000) -> None:
        self._kube = kube
        self._clock = clock
        self._component = component
        self._aggregate = aggregate_seconds
        self._max = max_cache
        self._seen: dict[tuple[str, str, str, str], tuple[str, int, float]] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[ObjectRef, str, str, bool, datetime]] | None = None
        if senders > 0:
            self._queue = queue.Queue(max_queue)
            for i in range(senders):
                threading.Thread(target=self._send_loop, name=f"events-{i}", daemon=True).start()

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        if self._queue is None:
            self._write(ref, reason, message, warning, self._clock.now())
            return
        try:
            self._queue.put_nowait((ref, reason, message, warning, self._clock.now()))
        except queue.Full:
            log.warning("event queue full: %s on %s %s dropped", reason, ref.kind, ref.name)

    def flush(self, timeout: float = 5.0) -> None:
        """Waits (bounded) until queued events are written; for a clean shutdown."""
        if self._queue is None:
            return
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)

    def _send_loop(self) -> None:
        assert self._queue is not None
        while True:
            ref, reason, message, warning, at = self._queue.get()
            try:
                self._write(ref, reason, message, warning, at)
            finally:
                self._queue.task_done()

    def _write(self, ref: ObjectRef, reason: str, message: str, warning: bool, now: datetime) -> None:
        key = (ref.kind, ref.name, reason, message)
        mono = self._clock.monotonic()
        with self._lock:
            prev = self._seen.get(key)
        try:
            if prev and mono - prev[2] < self._aggregate:
                name, count, first = prev
                try:
                    self._kube.patch(f"/api/v1/namespaces/{EVENT_NAMESPACE}/events/{name}",
                                     {"count": count + 1, "lastTimestamp": utc_iso(now)})
                    self._remember(key, name, count + 1, first)
                    return
                except NotFound:
                    pass
            name = f"{ref.name}.{secrets.token_hex(8)}"
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
                "involvedObject": ref.as_dict(),
                "reason": reason, "message": message[:1024],
                "type": "Warning" if warning else "Normal",
                "source": {"component": self._component},
                "reportingComponent": self._component,
                "firstTimestamp": utc_iso(now), "lastTimestamp": utc_iso(now), "count": 1,
            }
            self._kube.create(f"/api/v1/namespaces/{EVENT_NAMESPACE}/events", body)
            self._remember(key, name, 1, mono)
        except KubeError as e:
            log.warning("event %s on %s %s not written: %s", reason, ref.kind, ref.name, e)

    def _remember(self, key: tuple[str, str, str, str], name: str, count: int, first: float) -> None:
        with self._lock:
            if len(self._seen) >= self._max:
                self._seen.clear()
            self._seen[key] = (name, count, first)
