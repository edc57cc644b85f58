"""A work queue with per-key dedup, delayed adds and per-key exponential backoff.

A key is never handed to two workers at once; a key added while it is being processed
is handed out again once the worker is done (so no change is lost). A failing key backs
off alone: its delay doubles up to ``max_delay`` while every other key keeps flowing.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.05, max_delay: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._base = base_delay
        self._max = max_delay
        self._now = monotonic
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # key -> when it is due (queued, not processing)
        self._heap: list[tuple[float, str]] = []
        self._processing: set[str] = set()
        self._dirty: dict[str, float] = {}  # added while processing: due time after done()
        self._failures: dict[str, int] = {}
        self._closed = False

    def add(self, key: str, after: float = 0.0) -> None:
        when = self._now() + max(0.0, after)
        with self._cond:
            if self._closed:
                return
            if key in self._processing:
                self._dirty[key] = min(when, self._dirty.get(key, when))
                return
            if key in self._due and self._due[key] <= when:
                return
            self._due[key] = when
            heapq.heappush(self._heap, (when, key))
            self._cond.notify()

    def backoff(self, key: str) -> float:
        """Schedules ``key`` again after its next backoff delay; returns that delay."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = min(self._max, self._base * (2 ** n))
        self.add(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> str | None:
        """The next due key (now processing), or None on timeout or close."""
        deadline = None if timeout is None else self._now() + timeout
        with self._cond:
            while not self._closed:
                now = self._now()
                while self._heap:
                    when, key = self._heap[0]
                    if self._due.get(key) != when:
                        heapq.heappop(self._heap)  # superseded entry
                        continue
                    if when > now:
                        break
                    heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = 0.5
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = min(wait, deadline - now)
                self._cond.wait(max(wait, 0.001))
            return None

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            when = self._dirty.pop(key, None)
        if when is not None:
            self.add(key, max(0.0, when - self._now()))

    def depth(self) -> int:
        with self._cond:
            return len(self._due)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
