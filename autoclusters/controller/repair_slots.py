"""A pool's repair slots in use: its records in progress, plus the slots reserved by starts
whose record write is still on its way (``Reconciler.reconcile_node`` reserves under the
pool's lock)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable


class RepairSlots:
    def __init__(self, lock: threading.RLock, busy: Callable[[str], set[str]]) -> None:
        """``busy``: the pool's records in progress, read under ``lock`` (the fleet's)."""
        self._lock = lock
        self._busy = busy
        self._reserved: dict[str, set[str]] = defaultdict(set)

    def in_progress(self, pool: str, exclude: str = "") -> int:
        """Records of the pool in Draining/Acting/Verifying, plus slots reserved by starts
        whose record write is still on its way."""
        with self._lock:
            busy = self._busy(pool) | self._reserved.get(pool, set())
        busy.discard(exclude)
        return len(busy)

    def reserve(self, pool: str, record: str) -> None:
        with self._lock:
            self._reserved[pool].add(record)

    def unreserve(self, pool: str, record: str) -> None:
        with self._lock:
            self._reserved[pool].discard(record)
