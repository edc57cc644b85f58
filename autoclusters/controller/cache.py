"""The controller's view of the cluster: four informers (nodes, pools, records, the cluster
default policy) and the parts their events keep up to date, composed by ``Fleet``:

- ``pool_store.PoolStore``: the pools parsed, the default policy, the membership rule;
- ``node_index.NodeIndex``: pool of a node, members and faulty members of a pool, the
  heartbeat filter, the consumers of member changes;
- ``node_faults.FaultReader``: a node's active fault, classified once per version;
- ``record_index.RecordIndex``: records per node, a pool's records in progress and those not
  yet started, our own writes' versions;
- ``shard_ownership.ShardOwnership``: which pools and nodes are this shard's;
- ``repair_slots.RepairSlots``: a pool's slots in use, reservations included.

``Fleet`` routes each event: into the parts, then the work-queue keys it concerns (the node,
``pool:<name>`` when a pool's members or faulty count changed, the pool's held repairs when a
slot may have freed). The parts share the fleet's lock, so a reconcile answers "how many nodes
of this pool are faulty" or "which records does this node have" without a scan or a request.

Sharded (``controller.shards``), the callbacks drop the nodes and records of other shards'
pools at their first step, before any index: only the pools' own objects and, for every
record, which node has a repair of which pool in progress (a node with one belongs to that
pool's shard, whatever its labels say now) are kept of the others. Every pool is parsed, since
the membership rule needs them all to place a node, but only the shard's own are queued.
A node in no pool and without a repair in progress is the shard's whose name it hashes to
(``Shard.owns_unpooled``): that shard removes the marks a repair left on it. Whichever shard
owns a node also reads the node's closed records of other shards' pools (``records_of``): a
node's history (its attempt budget, its last reset, the sequence in its next record's name, and
whether the last repair cordoned it) is the node's, whatever pool it was repaired in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from autoclusters import api
from autoclusters.controller import remediation_record as rec
from autoclusters.controller.node_faults import FaultReader
from autoclusters.controller.node_index import MemberChanges, NodeIndex
from autoclusters.controller.pool_policy import Pool
from autoclusters.controller.pool_store import PoolStore
from autoclusters.controller.record_index import RecordIndex
from autoclusters.controller.repair_slots import RepairSlots
from autoclusters.controller.shard_ownership import ShardOwnership
from autoclusters.controller.shards import Shard
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.faults.catalog import Catalog, FaultRef
from autoclusters.kube import Kube
from autoclusters.kube.informer import WATCH_SECONDS, Informer, without_managed_fields
from autoclusters.names import Names
from autoclusters.pools import default_pool as defaults

JSON = dict[str, Any]
POOL_KEY = "pool:"


class Fleet:
    def __init__(self, kube: Kube, names: Names, catalog: Catalog, enqueue: Callable[[str], None], *,
                 namespace: str = DEFAULT_NAMESPACE, enqueue_pool: Callable[[str], None] | None = None,
                 shard: Shard | None = None, gather_seconds: float = 0.0, watch_seconds: int = WATCH_SECONDS) -> None:
        """``enqueue_pool`` queues a pool's key after a change of its nodes (the manager delays it
        to write one status for a burst of changes); ``enqueue`` by default.
        ``shard``: the pools this process owns (all by default). ``gather_seconds``: the node and
        record watches read a burst's events together (``Kube.watch``). ``watch_seconds``: each watch's
        length before the API server ends it and it is resumed (``Informer``'s ``watch_timeout``)."""
        self.names = names
        self._enqueue = enqueue
        self._enqueue_pool = enqueue_pool or enqueue
        self._lock = threading.RLock()
        self.pool_store = PoolStore(names, self._lock)
        self.node_index = NodeIndex(self._lock, names.taint_key)
        self.fault_reader = FaultReader(catalog, names, self._lock, self.node_index.is_printed)
        self.ownership = ShardOwnership(shard or Shard(), self._lock, lambda n: self.pool_store.membership.pool_of(n))
        self.shard = self.ownership.shard
        self._sharded = self.ownership.sharded
        g = names.api_group
        self.node_informer = Informer(kube, "/api/v1/nodes", self._on_node, name="nodes", gather_seconds=gather_seconds,
                                      watch_timeout=watch_seconds, transform=without_managed_fields)
        self.pool_informer = Informer(kube, Kube.custom_path(g, api.VERSION, api.POOLS.plural), self._on_pool,
                                      name=api.POOLS.plural, watch_timeout=watch_seconds,
                                      transform=without_managed_fields)
        self.record_informer = Informer(kube, Kube.custom_path(g, api.VERSION, api.REMEDIATIONS.plural),
                                        self._on_record, name=api.REMEDIATIONS.plural, gather_seconds=gather_seconds,
                                        watch_timeout=watch_seconds, transform=without_managed_fields)
        self.default_informer = Informer(kube, f"/api/v1/namespaces/{namespace}/configmaps", self._on_default,
                                         label_selector=defaults.SELECTOR, name="default-pool",
                                         watch_timeout=watch_seconds, transform=without_managed_fields)
        self.record_index = RecordIndex(self._lock, self.record_informer.get)
        self.slots = RepairSlots(self._lock, self.record_index.busy)

    def start(self, timeout: float = 60) -> None:
        # Pools (and the default policy) first, so node membership is known when the nodes arrive.
        self.default_informer.start()
        self.pool_informer.start()
        self.default_informer.synced.wait(timeout)
        self.pool_informer.synced.wait(timeout)
        self.record_informer.start()
        self.node_informer.start()
        for inf in (self.record_informer, self.node_informer):
            if not inf.synced.wait(timeout):
                raise TimeoutError(f"{inf.name} not listed within {timeout}s")

    def informers(self) -> tuple[Informer, ...]:
        """The cache's informers (its metric reads their handler errors)."""
        return self.node_informer, self.pool_informer, self.record_informer, self.default_informer

    def stop(self) -> None:
        for inf in self.informers():
            inf.stop()

    # --- reads, answered by the parts ------------------------------------------------------------
    @property
    def catalog(self) -> Catalog:
        return self.fault_reader.catalog

    @property
    def pools(self) -> dict[str, Pool]:
        return self.pool_store.pools

    @property
    def invalid_pools(self) -> dict[str, str]:
        return self.pool_store.invalid_pools

    @property
    def default_spec(self) -> JSON:
        return self.pool_store.default_spec

    @property
    def default_error(self) -> str:
        return self.pool_store.default_error

    def fault_of(self, node: JSON | None) -> tuple[FaultRef | None, JSON | None]:
        return self.fault_reader.fault_of(node)

    def pool_for(self, node: JSON) -> Pool | None:
        return self.pool_store.pool_for(node)

    def pool_named(self, name: str) -> Pool | None:
        return self.pool_store.pool_named(name)

    def member_nodes(self, pool: str, among: Iterable[str] | None = None) -> list[tuple[str, JSON]]:
        """The pool's members (only those ``among`` the names given, when given) with their
        stored objects; the work is the pool's size (or the names'), never the fleet's."""
        out = []
        for name in self.node_index.member_names(pool, among):
            node = self.node_informer.get(name)
            if node is not None:
                out.append((name, node))
        return out

    def track_members(self) -> MemberChanges:
        return self.node_index.track()

    def members(self, pool: str) -> set[str]:
        return self.node_index.members(pool)

    def counts(self, pool: str) -> tuple[int, int]:
        return self.node_index.counts(pool)

    def is_faulty(self, pool: str, node: str) -> bool:
        return self.node_index.is_faulty(pool, node)

    def faulty(self, pool: str) -> set[str]:
        return self.node_index.faulty(pool)

    def pool_name_of_node(self, name: str) -> str:
        return self.node_index.pool_of(name)

    def node(self, name: str) -> JSON | None:
        return self.node_informer.get(name)

    def owns_pool(self, pool: str) -> bool:
        return self.ownership.owns_pool(pool)

    def owns(self, key: str) -> bool:
        """Whether a work-queue key (a node's name or ``pool:<name>``) is this shard's to reconcile."""
        if not self._sharded:
            return True
        if key.startswith(POOL_KEY):
            return self.ownership.owns_pool(key[len(POOL_KEY):])
        node = self.node_informer.get(key)
        if node is not None:
            return self.ownership.owns_node(key, node)
        return self.ownership.owns_absent_node(key)

    def records_of(self, node: str) -> list[JSON]:
        """The node's records of this shard's pools; sharded, for a node of this shard, also its
        closed records of other shards' pools (a node that moved between pools, or left every
        pool), so its history is the one an unsharded controller sees: the attempt budget and
        the last reset count its repairs in every pool, and the next record's name (which counts
        the node's records) is never one a record of another pool already has. Another shard's
        record in progress is never read here: the node is that shard's until it ends."""
        foreign: list[str] = []
        with self._lock:
            names = self.record_index.names_of(node)
            if self._sharded and self.node_index.is_printed(node):  # indexed here
                foreign = self.ownership.foreign_records(node)
        out = [r for r in (self.record_informer.get(n) for n in names) if r is not None]
        out += [r for r in (self.record_informer.get(n) for n in foreign) if r is not None and not rec.is_active(r)]
        return sorted(out, key=lambda r: r["metadata"].get("creationTimestamp", ""))

    def in_progress(self, pool: str, exclude: str = "") -> int:
        return self.slots.in_progress(pool, exclude)

    def reserve(self, pool: str, record: str) -> None:
        self.slots.reserve(pool, record)

    def unreserve(self, pool: str, record: str) -> None:
        self.slots.unreserve(pool, record)

    # --- routing: pools and the default policy -----------------------------------------------------
    def _on_default(self, name: str, old: JSON | None, new: JSON | None) -> None:
        if self.pool_store.set_default(new) and self.node_informer.synced.is_set():
            self._reindex_all()

    def _on_pool(self, name: str, old: JSON | None, new: JSON | None) -> None:
        spec_changed = self.pool_store.apply(name, old, new)
        if spec_changed and self.node_informer.synced.is_set():
            self._reindex_all()
            for node in self.members(name):
                self._enqueue(node)
        if self.shard.owns(name):
            self._enqueue(POOL_KEY + name)

    def pool_written(self, obj: JSON) -> None:
        """Our own status write: keep the store and the parsed pool in step before the watch says so."""
        name = obj["metadata"]["name"]
        before = self.pool_informer.get(name)
        self.pool_informer.upsert(obj)
        if before is not None and self.pool_informer.get(name) is obj and before.get("spec") != obj.get("spec"):
            # The write's answer carries a spec changed since the store's copy: handled here as its
            # watch event would be (members re-indexed), since that event now finds the store
            # already holding the new spec and sees no change.
            self._on_pool(name, before, obj)
            return
        self.pool_store.written(obj)

    def _reindex_all(self) -> None:
        for node in self.node_informer.items():
            name = node["metadata"]["name"]
            if self._sharded:
                ours, owned = self.node_index.is_indexed(name), self.ownership.owns_node(name, node)
                if not owned:
                    if ours:
                        self._forget_node(name)
                    continue
                if not ours:
                    self._index_node(name, node)
                    self._enqueue(name)  # came to this shard (a pool's spec or the default policy changed)
                    continue
            self._index_node(name, node)

    # --- routing: nodes ------------------------------------------------------------------------------
    def _forget_node(self, name: str) -> None:
        """A node that went to another shard: out of the indexes, as if deleted."""
        self._index_node(name, None)
        with self._lock:
            self.node_index.unprint(name)
            self.fault_reader.forget(name)

    def _refilter(self, name: str) -> None:
        """The node's shard may have changed (a repair of it began or ended): taken in, or let go."""
        node = self.node_informer.get(name)
        if node is None:
            return
        owned, ours = self.ownership.owns_node(name, node), self.node_index.is_indexed(name)
        if owned and not ours:
            self._on_node(name, None, node)
        elif ours and not owned:
            self._on_node(name, node, None)

    def _index_node(self, name: str, node: JSON | None) -> tuple[str, str]:
        pool = self.pool_store.pool_for(node) if node is not None else None
        return self.node_index.place(name, pool.name if pool is not None else "",
                                     lambda: self.fault_reader.repairable(node, pool))

    def _on_node(self, name: str, old: JSON | None, new: JSON | None) -> None:
        if self._sharded and (new is None or not self.ownership.owns_node(name, new)):
            if not self.node_index.is_indexed(name):
                return  # another shard's node (or never indexed): nothing here
            new = None  # left this shard (or deleted): out of the indexes, as if deleted
        # The previous version's fingerprint is kept, so a heartbeat costs one fingerprint, not two.
        fingerprint = self.node_index.fingerprint(new)
        with self._lock:
            seen = self.node_index.remember(name, fingerprint, new is not None)
            if new is None:
                self.fault_reader.forget(name)
        # No fingerprint kept (the last version's indexing raised, or its event is still on its
        # way): indexed in full, whatever changed.
        if old is not None and new is not None and seen is not None and fingerprint is not None:
            if seen == fingerprint:
                return  # a heartbeat: nothing a repair depends on changed
            if seen[0] == fingerprint[0] and seen[3] == fingerprint[3]:
                # The same labels and conditions (only annotations, spec, boot id...): the same pool
                # and the same fault, so the indexes stand (the pools' changes re-index every node).
                self.node_index.mark_changed(name)
                self._enqueue(name)
                return
        with self._lock:  # as indexed from the version seen last (the pools' changes re-index every node)
            was = self.node_index.pool_of(name)
            was_faulty = old is not None and self.node_index.is_faulty(was, name)
        try:
            before, after = self._index_node(name, new)
        except Exception:
            self.node_index.unprint(name)  # not indexed: the node's next event, even a heartbeat, indexes it again
            raise
        self._enqueue(name)
        now_faulty = self.is_faulty(after, name) if after else False
        if before != after or was_faulty != now_faulty or new is None:
            for pool in {before, after} - {""}:
                self._enqueue_pool(POOL_KEY + pool)

    def node_written(self, obj: JSON) -> None:
        """Our own write of a node (the actuator's, a provider's): into the store at once, and
        handled as its watch event would be (indexes, keys), so the next reconcile never acts on
        an older copy (a stale copy would fail the next guarded patch's resourceVersion test and
        cost a read). The watch event, when it comes, then changes nothing."""
        name = obj["metadata"]["name"]
        old = self.node_informer.get(name)
        self.node_informer.upsert(obj)
        new = self.node_informer.get(name)
        if new is not old:
            self._on_node(name, old, new)

    def node_deleted(self, name: str) -> None:
        """A node we deleted (a provider's replacement): gone from the store and the indexes
        before its watch event."""
        old = self.node_informer.get(name)
        self.node_informer.remove(name)
        if old is not None:
            self._on_node(name, old, None)

    # --- routing: records ----------------------------------------------------------------------------
    def _on_record(self, name: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old or {}
        node = (obj.get("spec") or {}).get("node", "")
        pool = (obj.get("spec") or {}).get("pool", "")
        if self._sharded:
            mine, moved = self.ownership.note_record(name, node, pool, new)
            if moved and node:
                self._refilter(node)
            if not mine:
                return  # another shard's record
        self.record_index.update(name, node, pool, new is not None)
        if not self.record_index.is_news(name, old, new):
            return
        if node:
            self._enqueue(node)
        was_active = old is not None and rec.is_active(old)
        if was_active and (new is None or not rec.is_active(new)):
            self.wake_held(pool)  # a slot may have freed

    def wake_held(self, pool: str) -> None:
        """A slot may have freed (or the breaker closed): the pool's repairs not yet started look again.
        Repairs already in progress wait for no slot, so they are not woken."""
        for node in self.record_index.waiting_nodes(pool):
            self._enqueue(node)

    def record_deleted(self, name: str) -> None:
        """A record found deleted by our own write (a 404): out of the store and the indexes now."""
        old = self.record_informer.get(name)
        self.record_informer.remove(name)
        if old is not None:
            self._on_record(name, old, None)

    def record_written(self, obj: JSON) -> None:
        self.record_informer.upsert(obj)
        self.record_index.written(obj)
