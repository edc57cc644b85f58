"""Which nodes and pools are this shard's (``controller.shards``), and what of the other shards'
records is kept to know it: for every node, its repairs in progress or not yet started with their
pool (a node with one belongs to that pool's shard, whatever its labels say now), and the names
of the other shards' records of it (a node's closed records are its history wherever it is now).
Unsharded, everything is this process's and nothing is kept."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from autoclusters.controller import remediation_record as rec
from autoclusters.controller.shards import Shard

JSON = dict[str, Any]


class ShardOwnership:
    def __init__(self, shard: Shard, lock: threading.RLock, pool_of: Callable[[JSON], str | None]) -> None:
        """``pool_of``: a node's pool by the membership rule of the moment."""
        self.shard = shard
        self.sharded = shard.sharded
        self._lock = lock  # the fleet's
        self._pool_of = pool_of
        # node -> {record: pool} of every shard's records in progress or not yet started
        # (kept only when sharded): the node belongs to the shard of its repair's pool
        self._repairs: dict[str, dict[str, str]] = {}
        # node -> other shards' records of it (kept only when sharded; names only): the closed ones
        # are part of the node's history wherever it is now (Fleet.records_of)
        self._foreign_records: dict[str, set[str]] = defaultdict(set)

    def owns_pool(self, pool: str) -> bool:
        return self.shard.owns(pool)

    def owns_node(self, name: str, node: JSON) -> bool:
        """The node's repair in progress is of one of this shard's pools, or it has none and the
        membership rule puts it in one of them, or in no pool and its name hashes to this shard."""
        repairs = self._repairs.get(name)
        if repairs:
            return any(self.shard.owns(pool) for pool in repairs.values())
        pool = self._pool_of(node)
        return self.shard.owns_unpooled(name) if pool is None else self.shard.owns(pool)

    def owns_absent_node(self, name: str) -> bool:
        """A node the store does not hold: this shard's while one of its pools' repairs of it is open."""
        return any(self.shard.owns(pool) for pool in self._repairs.get(name, {}).values())

    def note_record(self, name: str, node: str, pool: str, new: JSON | None) -> tuple[bool, bool]:
        """A record's event (``new`` None: deleted), sharded only: (the record is this shard's,
        the node's set of pools with a repair in progress changed: its shard may have)."""
        mine = self.shard.owns(pool)
        if not mine and node:
            with self._lock:
                if new is None:
                    self._foreign_records[node].discard(name)
                    if not self._foreign_records[node]:
                        del self._foreign_records[node]
                else:
                    self._foreign_records[node].add(name)
        return mine, self._track_repairs(name, node, pool, new)

    def _track_repairs(self, name: str, node: str, pool: str, new: JSON | None) -> bool:
        """Keeps ``_repairs`` in step with one record of any shard; True when the node's set of
        pools with a repair in progress changed."""
        with self._lock:
            repairs = self._repairs.get(node, {})
            before = set(repairs.values())
            if new is not None and rec.is_active(new):
                repairs = {**repairs, name: pool}
            elif name in repairs:
                repairs = {k: v for k, v in repairs.items() if k != name}
            if repairs:
                self._repairs[node] = repairs
            else:
                self._repairs.pop(node, None)
            return set(repairs.values()) != before

    def foreign_records(self, node: str) -> list[str]:
        """The other shards' records of the node (names; none unsharded)."""
        with self._lock:
            if not self.sharded or node not in self._foreign_records:
                return []
            return list(self._foreign_records[node])
