"""The one place that writes the agent's conditions to the API server.

Guarantees:

1. Coalescing: any number of changes to a node's conditions between two writes become
   one strategic-merge patch of ``nodes/<name>/status`` that lists only the agent's own
   condition types, so the kubelet's and other agents' conditions are never touched.
2. Heartbeat and resync: every condition is rewritten with a fresh ``lastHeartbeatTime``
   at the heartbeat interval even when nothing changed; after a failed write the node's
   current conditions are read again before the next try (which waits an exponential
   backoff), so ``lastTransitionTime`` stays right.
3. Isolation: each node has its own backoff and at most one write in flight; writes run
   on a small pool, so one node whose writes fail or hang never delays another node.
   A global rate limit keeps a process that serves many simulated nodes polite.
4. Bounded memory: an API server that is away for minutes costs nothing that grows. What is
   pending is the latest desired state per node and condition type (``pending``), never a
   queue of writes; each request gives up after ``request_timeout_s``, and the backoff is
   capped at ``backoff_max_s``, so the condition is written at most that long after the API
   server is back.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from autoclusters.clock import Clock, utc_iso
from autoclusters.deploy.workloads import DETECTOR
from autoclusters.detector.conditions import ConditionState
from autoclusters.kube import Kube
from autoclusters.kube.errors import KubeError, NotFound
from autoclusters.kube.events import EventRecorder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterConfig:
    heartbeat_s: float = 300.0
    min_interval_s: float = 1.0  # at most one write per node per interval (rate limit)
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    workers: int = 4
    qps: float = 50.0  # writes per second for the whole process
    request_timeout_s: float = 30.0  # one write or read of a node: an unanswered one fails after this


@dataclass
class _Node:
    desired: dict[str, ConditionState] = field(default_factory=dict)
    written: dict[str, tuple[ConditionState, str]] = field(default_factory=dict)  # state, lastTransitionTime
    synced: bool = False  # read the node's conditions since the last error
    dirty: bool = True
    next_heartbeat: float = 0.0
    not_before: float = 0.0
    failures: int = 0
    in_flight: bool = False
    last_error: str = ""


class _TokenBucket:
    def __init__(self, rate: float, clock: Clock) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = max(1.0, rate)
        self.stamp = clock.monotonic()

    def take(self) -> bool:
        now = self.clock.monotonic()
        self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class ConditionWriter:
    def __init__(self, kube: Kube, clock: Clock, config: WriterConfig | None = None) -> None:
        self.kube = kube
        self.clock = clock
        self.config = config or WriterConfig()
        self._nodes: dict[str, _Node] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="condition-writer")
        self._bucket = _TokenBucket(self.config.qps, clock)
        self._futures: set[Future[None]] = set()
        self.writes = 0
        self.failures = 0

    # --- what the agents call ----------------------------------------------------------
    def set(self, node: str, ctype: str, state: ConditionState | None) -> None:
        """The state a condition should have; None keeps what the node shows now."""
        with self._lock:
            st = self._nodes.setdefault(node, _Node())
            if state is None:
                return
            if st.desired.get(ctype) != state:
                st.desired[ctype] = state
                st.dirty = True
                self._wake.set()

    def forget(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    def pending(self) -> tuple[int, int, int]:
        """What this writer holds, however long the API server is away: (nodes, conditions,
        writes in flight). Bounded by design: one entry per node served, one desired state per
        condition type (a newer state replaces an older one; nothing queues), at most one
        write in flight per node."""
        with self._lock:
            return (len(self._nodes), sum(len(st.desired) for st in self._nodes.values()), len(self._futures))

    def status(self, node: str) -> dict[str, Any]:
        with self._lock:
            st = self._nodes.get(node)
            if not st:
                return {}
            return {"failures": st.failures, "last_error": st.last_error, "dirty": st.dirty,
                    "written": {t: s.status for t, (s, _) in st.written.items()}}

    # --- the loop ------------------------------------------------------------------------
    def step(self) -> list[str]:
        """Starts a write for every node that is due; returns their names."""
        now = self.clock.monotonic()
        started: list[str] = []
        with self._lock:
            for name, st in self._nodes.items():
                if st.in_flight or now < st.not_before or not st.desired:
                    continue
                if not (st.dirty or now >= st.next_heartbeat or not st.synced):
                    continue
                if not self._bucket.take():
                    break
                st.in_flight = True
                started.append(name)
        for name in started:
            fut = self._pool.submit(self._write, name)
            with self._lock:
                self._futures.add(fut)
            fut.add_done_callback(self._done)
        return started

    def _done(self, fut: Future[None]) -> None:
        with self._lock:
            self._futures.discard(fut)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Blocks until every started write has finished (tests and shutdown)."""
        with self._lock:
            pending = list(self._futures)
        for fut in pending:
            fut.result(timeout=timeout)

    def run(self, stop: threading.Event, tick_s: float = 0.2) -> None:
        while not stop.is_set():
            self.step()
            self._wake.wait(tick_s)
            self._wake.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    # --- one node's write ----------------------------------------------------------------
    def _write(self, name: str) -> None:
        try:
            with self._lock:
                st = self._nodes.get(name)
                need_sync = st is not None and not st.synced
            if st is None:
                return
            if need_sync:
                self._resync(name)
            with self._lock:
                if not st.desired:
                    st.synced, st.in_flight = True, False
                    return
                body, snapshot = self._patch_body(st)
            self.kube.patch_node_status(name, body, timeout=self.config.request_timeout_s)
            with self._lock:
                now = self.clock.monotonic()
                st.written.update(snapshot)
                # a set() that raced with this write leaves the node dirty for the next one
                st.dirty = st.desired.keys() != snapshot.keys() or any(
                    st.desired.get(t) != s for t, (s, _) in snapshot.items())
                st.failures = 0
                st.last_error = ""
                st.next_heartbeat = now + self.config.heartbeat_s
                st.not_before = now + self.config.min_interval_s
                st.in_flight = False
                self.writes += 1
        except NotFound:
            log.info("node %s is gone; no longer writing its conditions", name)
            self.forget(name)
        except Exception as e:  # noqa: BLE001 - any failure backs off this node only
            with self._lock:
                st2 = self._nodes.get(name)
                self.failures += 1
                if st2 is not None:
                    st2.failures += 1
                    st2.synced = False
                    st2.dirty = True
                    st2.last_error = str(e)[:300]
                    delay = min(self.config.backoff_max_s,
                                self.config.backoff_initial_s * 2 ** (st2.failures - 1))
                    st2.not_before = self.clock.monotonic() + delay
                    st2.in_flight = False
            level = logging.WARNING if isinstance(e, KubeError) else logging.ERROR
            log.log(level, "writing conditions of node %s failed (retry with backoff): %s", name, e)
        self._wake.set()

    def _resync(self, name: str) -> None:
        """Reads the node's own-type conditions so transition times and kept states are right."""
        node = self.kube.get_node(name, timeout=self.config.request_timeout_s)
        conds = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
        with self._lock:
            st = self._nodes.get(name)
            if st is None:
                return
            st.written = {}
            for ctype in set(st.desired) | set(conds):
                c = conds.get(ctype)
                if c is None:
                    continue
                seen = ConditionState(ctype, str(c.get("status", "")), str(c.get("reason", "")),
                                      str(c.get("message", "")))
                if ctype in st.desired:
                    st.written[ctype] = (seen, str(c.get("lastTransitionTime") or ""))
            st.synced = True

    def _patch_body(self, st: _Node) -> tuple[dict[str, Any], dict[str, tuple[ConditionState, str]]]:
        stamp = utc_iso(self.clock.now())
        conditions = []
        snapshot: dict[str, tuple[ConditionState, str]] = {}
        for ctype, want in sorted(st.desired.items()):
            prev = st.written.get(ctype)
            transition = prev[1] if prev and prev[0].status == want.status and prev[1] else stamp
            conditions.append({"type": ctype, "status": want.status, "reason": want.reason,
                               "message": want.message, "lastHeartbeatTime": stamp,
                               "lastTransitionTime": transition})
            snapshot[ctype] = (want, transition)
        return {"status": {"conditions": conditions}}, snapshot


def warning_recorder(kube: Kube, clock: Clock, instance: str = "") -> EventRecorder:
    """The agent's other writer: warning-severity faults as events on the node, through the
    client layer's one event recorder. Events are written from its own thread, so a slow API
    server never delays polling. Repeats are not aggregated into one event (which would be a
    patch): the detector's role may create events, never change them, and the agent already
    reports a warning once per node, fault and boot."""
    return EventRecorder(kube, clock, DETECTOR, instance=instance, aggregate_seconds=0, max_cache=256,
                         background=True)
