"""A node's active fault, read from its conditions through the fault catalog, with the answer
kept for the node object last asked about (one classification per version of a node)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from autoclusters.api import CatalogAction
from autoclusters.controller.pool_policy import Pool
from autoclusters.faults.catalog import Catalog, FaultRef
from autoclusters.names import Names

JSON = dict[str, Any]


class FaultReader:
    def __init__(self, catalog: Catalog, names: Names, lock: threading.RLock,
                 is_stored: Callable[[str], bool]) -> None:
        """``lock``: the fleet's; ``is_stored``: whether the store holds the node (asked under
        the lock): a deleted node's answer is not remembered."""
        self.catalog = catalog
        self._names = names
        self._lock = lock
        self._is_stored = is_stored
        self._fault_types = names.fault_conditions  # (GPU, interconnect): the order fault_of looks in
        # node -> (the node object last classified, its fault, the condition it came from)
        self._seen: dict[str, tuple[JSON, FaultRef | None, JSON | None]] = {}

    def fault_of(self, node: JSON | None) -> tuple[FaultRef | None, JSON | None]:
        """The node's active fault (GPU first, then interconnect) and the condition it came from.
        The answer for the node object last asked about is kept: the store replaces an object
        when the node changes, so the reconciles of one version classify it once."""
        if node is None:
            return None, None
        name = (node.get("metadata") or {}).get("name")
        seen = self._seen.get(name) if name else None
        if seen is not None and seen[0] is node:
            return seen[1], seen[2]
        ref, cond = self._classify(node)
        if name:
            with self._lock:
                if self._is_stored(name):  # a node the store holds (a deleted one is not remembered)
                    self._seen[name] = (node, ref, cond)
        return ref, cond

    def forget(self, name: str) -> None:
        """The node left the store (or this shard): its kept answer goes with it."""
        with self._lock:
            self._seen.pop(name, None)

    def remembers(self, name: str) -> bool:
        with self._lock:
            return name in self._seen

    def _classify(self, node: JSON) -> tuple[FaultRef | None, JSON | None]:
        gpu_type, link_type = self._fault_types
        gpu = link = None
        for c in (node.get("status") or {}).get("conditions") or []:
            ctype = c.get("type")  # the last condition of a type counts, as in a dict built from the list
            if ctype == gpu_type:
                gpu = c
            elif ctype == link_type:
                link = c
        found = [(ref, cond) for cond in (gpu, link) if cond
                 and (ref := self.catalog.fault_from_condition(cond, self._names)) is not None]
        # a fault whose catalog action repairs comes first: an unknown GPU code (action none) on
        # the GPU condition must not hide an interconnect fault that needs a repair
        found.sort(key=lambda f: f[0].action == CatalogAction.NONE)
        return found[0] if found else (None, None)

    def repairable(self, node: JSON | None, pool: Pool | None) -> bool:
        """The node has a fault its pool repairs."""
        ref, _ = self.fault_of(node)
        return ref is not None and pool is not None and pool.action_for(ref) is not None
