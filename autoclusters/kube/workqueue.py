"""A work queue with per-key dedup, delayed adds and per-key exponential backoff.

A key is never handed to two workers at once; a key added while it is being processed
is handed out again once the worker is done (so no change is lost). A failing key backs
off alone: its delay doubles up to ``max_delay`` while every other key keeps flowing.

Waiting costs nothing while nothing is due: a worker in ``get`` sleeps on the queue's condition
until a key is added or ``close`` is called, never waking to look (a controller's workers are
idle most of the time, and sixteen polling threads cost CPU and the GIL every second). Of the
waiting workers only one, the timer, sleeps until the earliest delayed key is due; the others
sleep until they are woken. An add wakes one worker, and only when the key is due sooner than
the timer would wake (a key due later needs nobody woken); a worker that takes a key while more
keys are waiting wakes another to be the timer. The timeouts are on the real clock: with a fake
``monotonic`` (tests), ``get(timeout=0)`` hands out what is due by that clock.
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
        self._timer_at: float | None = None  # when the worker waiting for the earliest delayed key wakes

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
            if self._timer_at is None or when < self._timer_at:
                self._cond.notify()  # due sooner than the timer wakes (or no timer): one worker looks

    def backoff(self, key: str, *, at_least: float = 0.0) -> float:
        """Schedules ``key`` again after its next backoff delay, or ``at_least`` (a server's
        Retry-After) when that is longer; returns the delay."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = max(at_least, min(self._max, self._base * (2 ** n)))
        self.add(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> str | None:
        """The next due key (now processing), or None on timeout or close. Blocks without waking
        until a key is due (``timeout`` None: for as long as that takes)."""
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
                    if self._heap and self._timer_at is None:
                        self._cond.notify()  # more keys wait: another worker becomes the timer
                    return key
                if deadline is not None and now >= deadline:
                    return None
                wake = self._heap[0][0] if self._heap else None
                if wake is not None and (self._timer_at is None or wake < self._timer_at):
                    self._timer_at = wake  # this worker is the timer until the earliest key is due
                    wait = wake - now if deadline is None else min(wake, deadline) - now
                    self._cond.wait(wait)
                    if self._timer_at == wake:
                        self._timer_at = None
                        if deadline is not None and self._now() >= deadline:
                            self._cond.notify()  # leaving: another worker takes the timer over
                else:
                    self._cond.wait(None if deadline is None else deadline - now)
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
