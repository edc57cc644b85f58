"""The Remediation records' indexes: each node's records, each pool's records in progress and
those not yet started (with their node), and the version of our own last write of each record
(its watch echo is not news)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from autoclusters.api import IN_PROGRESS, Phase
from autoclusters.controller import remediation_record as rec

JSON = dict[str, Any]
# A repair decided but not started: it waits for the guards (a slot, the breaker, an approval).
PRE_START = frozenset({Phase.AWAITING_APPROVAL, Phase.SCHEDULED})


class RecordIndex:
    def __init__(self, lock: threading.RLock, stored: Callable[[str], JSON | None]) -> None:
        """``stored``: the record as the store holds it now."""
        self._lock = lock  # the fleet's
        self._stored = stored
        self._by_node: dict[str, set[str]] = defaultdict(set)
        self._busy: dict[str, set[str]] = defaultdict(set)  # pool -> its records in progress
        self._waiting: dict[str, dict[str, str]] = defaultdict(dict)  # pool -> record -> node, repairs not started
        self._written_rv: dict[str, str | None] = {}  # record -> the version of our last write of it

    def update(self, name: str, node: str, pool: str, present: bool) -> None:
        """The store's copy of the record changed (``present`` False: it left the store)."""
        with self._lock:
            if present:
                self._by_node[node].add(name)
            else:
                self._by_node[node].discard(name)
            self._index(name, pool)

    def _index(self, name: str, pool: str) -> None:
        """Keeps the pool's sets in step with the store; called under the lock after every change
        of the store, so it always reads the version the store kept."""
        stored = self._stored(name)
        phase = rec.phase_of(stored) if stored is not None else None
        if stored is not None and phase in IN_PROGRESS:
            self._busy[pool].add(name)
        else:
            self._busy[pool].discard(name)
        if stored is not None and (phase is None or phase in PRE_START):
            self._waiting[pool][name] = (stored.get("spec") or {}).get("node", "")
        else:
            self._waiting[pool].pop(name, None)

    def written(self, obj: JSON) -> None:
        """Our own write of a record, already in the store."""
        name = obj["metadata"]["name"]
        self._written_rv[name] = obj["metadata"].get("resourceVersion")
        self.update(name, (obj.get("spec") or {}).get("node", ""), (obj.get("spec") or {}).get("pool", ""), True)

    def is_news(self, name: str, old: JSON | None, new: JSON | None) -> bool:
        """Whether an event of the record says something not seen yet: not our own write (its
        echo, or an older event that came after it: the store keeps ours), nor a version already
        seen. A deletion is news, and our write's version is forgotten with it."""
        if new is None:
            self._written_rv.pop(name, None)
            return True
        return new["metadata"].get("resourceVersion") not in (
            self._written_rv.get(name), (old or {}).get("metadata", {}).get("resourceVersion"))

    def names_of(self, node: str) -> list[str]:
        with self._lock:
            return list(self._by_node.get(node, ()))

    def busy(self, pool: str) -> set[str]:
        """The pool's records in progress (the index's own set: read it under the lock)."""
        return self._busy.get(pool, set())

    def waiting_nodes(self, pool: str) -> set[str]:
        """The nodes of the pool's repairs not yet started."""
        with self._lock:
            return set(self._waiting.get(pool, {}).values())
