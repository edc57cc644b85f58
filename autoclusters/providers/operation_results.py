"""What a provider's own thread did for each operation, kept so that ``progress`` can report it
and ``drive`` never starts the same operation twice, with a bound on the finished ones.

A provider that runs its action in a thread of its own (the command provider, the remote resets:
Redfish, EC2) keeps one entry per operation: running, then its result. An entry that is never
dropped is one per repair for the controller's whole life: a controller runs for months at one
repair every few seconds, so the finished ones are kept only as long as they can still be asked
for. Once its result is reported, the actuator records the operation's end (Verifying, or the
failure) and asks no more, so only the last few finished ones are ever read again (a write of
that end that failed and is retried); ``KEEP_FINISHED`` of them are kept, the oldest dropped.
A running entry is never dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

T = TypeVar("T")

KEEP_FINISHED = 1024  # finished operations remembered: far more than are ever in flight at once


class OperationResults(Generic[T]):
    """Operation id -> running (``None``) or its result; thread-safe."""

    def __init__(self, keep_finished: int = KEEP_FINISHED) -> None:
        if keep_finished < 1:
            raise ValueError(f"keep_finished must be at least 1, not {keep_finished}")
        self._keep = keep_finished
        self._running: set[str] = set()
        self._finished: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, op_id: str) -> bool:
        """True when ``op_id`` is new (the caller starts its thread), False when it is running or
        finished already."""
        with self._lock:
            if op_id in self._running or op_id in self._finished:
                return False
            self._running.add(op_id)
            return True

    def finish(self, op_id: str, result: T) -> None:
        with self._lock:
            self._running.discard(op_id)
            self._finished[op_id] = result
            self._finished.move_to_end(op_id)
            while len(self._finished) > self._keep:
                self._finished.popitem(last=False)

    def known(self, op_id: str) -> bool:
        with self._lock:
            return op_id in self._running or op_id in self._finished

    def result(self, op_id: str) -> T | None:
        """The result, or None while it runs (or when unknown: ask ``known`` first)."""
        with self._lock:
            return self._finished.get(op_id)

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def __len__(self) -> int:
        with self._lock:
            return len(self._running) + len(self._finished)
