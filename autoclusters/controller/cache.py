"""The controller's view of the cluster: informers for nodes, pools and records, plus the
indexes a reconcile needs (pool of a node, faulty nodes per pool, records per node).

Indexes are updated by the informers' callbacks, so a reconcile answers "how many nodes of
this pool are faulty" or "which records does this node have" without a scan or a request.

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

import logging
import operator
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from autoclusters import api
from autoclusters.api import IN_PROGRESS, CatalogAction, ConsentMode, Phase
from autoclusters.controller import remediation_record as rec
from autoclusters.controller.pool_policy import Pool, PoolConfigError, default_pool, parse_pool
from autoclusters.controller.shards import Shard
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.faults.catalog import Catalog, FaultRef
from autoclusters.kube import Kube
from autoclusters.kube.informer import Informer
from autoclusters.names import Names
from autoclusters.pools import default_pool as defaults
from autoclusters.pools.membership import Membership

log = logging.getLogger(__name__)

JSON = dict[str, Any]
POOL_KEY = "pool:"
# A repair decided but not started: it waits for the guards (a slot, the breaker, an approval).
PRE_START = frozenset({Phase.AWAITING_APPROVAL, Phase.SCHEDULED})
# The fields of a node condition a reconcile can react to (its times are heartbeats); read in
# one C call when the condition has all four, the common case.
_CONDITION_FIELDS = operator.itemgetter("type", "status", "reason", "message")


class MemberChanges:
    """The nodes of each pool changed since their consumer last took them: joined, left, or
    changed in what a reconcile can react to (``Fleet._fingerprint``); heartbeats are not
    changes. Lets a consumer that keeps an answer per member (the pool's provider condition)
    ask again only about these, not about the whole pool."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock  # the fleet's: marks are made under it, with the index change they follow
        self._changed: dict[str, set[str]] = defaultdict(set)

    def mark(self, pool: str, node: str) -> None:
        with self._lock:
            self._changed[pool].add(node)

    def take(self, pool: str) -> set[str]:
        """The pool's changed nodes since the last take, forgotten here (a node changed again
        after this is marked again)."""
        with self._lock:
            return self._changed.pop(pool, set())


class Fleet:
    def __init__(self, kube: Kube, names: Names, catalog: Catalog, enqueue: Callable[[str], None], *,
                 namespace: str = DEFAULT_NAMESPACE, enqueue_pool: Callable[[str], None] | None = None,
                 shard: Shard | None = None, gather_seconds: float = 0.0) -> None:
        """``enqueue_pool`` queues a pool's key after a change of its nodes (the manager delays it
        to write one status for a burst of changes); ``enqueue`` by default.
        ``shard``: the pools this process owns (all by default). ``gather_seconds``: the node and
        record watches read a burst's events together (``Kube.watch``)."""
        self.names = names
        self._taint_key = names.taint_key
        self._written_rv: dict[str, str | None] = {}  # record -> the version of our last write of it
        self.shard = shard or Shard()
        self._sharded = self.shard.sharded
        # node -> {record: pool} of every shard's records in progress or not yet started
        # (kept only when sharded): the node belongs to the shard of its repair's pool
        self._repairs: dict[str, dict[str, str]] = {}
        # node -> other shards' records of it (kept only when sharded; names only): the closed ones
        # are part of the node's history wherever it is now (records_of)
        self._foreign_records: dict[str, set[str]] = defaultdict(set)
        self.catalog = catalog
        self._enqueue = enqueue
        self._enqueue_pool = enqueue_pool or enqueue
        self._lock = threading.RLock()
        self.pools: dict[str, Pool] = {}
        self._membership = Membership((), names)
        self.invalid_pools: dict[str, str] = {}
        # the cluster default policy (deploy.default_pool): its spec, why the ConfigMap was not
        # used ("" when it was, or when there is none), and the pools it made, by label value
        self.default_spec, self.default_error = defaults.spec_of(None)
        self._default_pools: dict[str, Pool | None] = {}
        self._node_pool: dict[str, str] = {}
        self._members: dict[str, set[str]] = defaultdict(set)
        self._faulty: dict[str, set[str]] = defaultdict(set)
        self._records_by_node: dict[str, set[str]] = defaultdict(set)
        self._reserved: dict[str, set[str]] = defaultdict(set)
        self._busy: dict[str, set[str]] = defaultdict(set)  # pool -> its records in progress (index of the store)
        self._waiting: dict[str, dict[str, str]] = defaultdict(dict)  # pool -> record -> node, repairs not started
        self._prints: dict[str, tuple[Any, ...] | None] = {}  # node -> fingerprint of the version last seen
        # node -> (the node object last classified, its fault, the condition it came from)
        self._faults: dict[str, tuple[JSON, FaultRef | None, JSON | None]] = {}
        self._fault_types = names.fault_conditions  # (GPU, interconnect): the order fault_of looks in
        self._trackers: list[MemberChanges] = []
        g = names.api_group
        self.node_informer = Informer(kube, "/api/v1/nodes", self._on_node, name="nodes", gather_seconds=gather_seconds)
        self.pool_informer = Informer(kube, Kube.custom_path(g, api.VERSION, api.POOLS.plural), self._on_pool,
                                      name=api.POOLS.plural)
        self.record_informer = Informer(kube, Kube.custom_path(g, api.VERSION, api.REMEDIATIONS.plural),
                                        self._on_record, name=api.REMEDIATIONS.plural, gather_seconds=gather_seconds)
        self.default_informer = Informer(kube, f"/api/v1/namespaces/{namespace}/configmaps", self._on_default,
                                         label_selector=defaults.SELECTOR, name="default-pool")

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

    # --- faults ------------------------------------------------------------------------------
    def fault_of(self, node: JSON | None) -> tuple[FaultRef | None, JSON | None]:
        """The node's active fault (GPU first, then interconnect) and the condition it came from.
        The answer for the node object last asked about is kept: the store replaces an object
        when the node changes, so the reconciles of one version classify it once."""
        if node is None:
            return None, None
        name = (node.get("metadata") or {}).get("name")
        seen = self._faults.get(name) if name else None
        if seen is not None and seen[0] is node:
            return seen[1], seen[2]
        ref, cond = self._classify(node)
        if name:
            with self._lock:
                if name in self._prints:  # a node the store holds (a deleted one is not remembered)
                    self._faults[name] = (node, ref, cond)
        return ref, cond

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
                 and (ref := self.catalog.fault_from_condition(cond, self.names)) is not None]
        # a fault whose catalog action repairs comes first: an unknown GPU code (action none) on
        # the GPU condition must not hide an interconnect fault that needs a repair
        found.sort(key=lambda f: f[0].action == CatalogAction.NONE)
        return found[0] if found else (None, None)

    def _repairable(self, node: JSON | None, pool: Pool | None) -> bool:
        ref, _ = self.fault_of(node)
        return ref is not None and pool is not None and pool.action_for(ref) is not None

    # --- pools -------------------------------------------------------------------------------
    def pool_for(self, node: JSON) -> Pool | None:
        """The node's pool by the membership rule (``deploy.membership``), among the valid pools."""
        with self._lock:
            membership = self._membership
        name = membership.pool_of(node)
        return self.pool_named(name) if name else None

    def _pools_changed(self) -> None:
        mode = self.default_spec.get("consentMode", api.DEFAULT_CONSENT_MODE)
        self._membership = Membership((p.config for p in self.pools.values()), self.names,
                                      default=mode != ConsentMode.OFF, invalid=self.invalid_pools)
        self._default_pools = {}

    def pool_named(self, name: str) -> Pool | None:
        """A GpuNodePool, or a pool label value under the cluster default policy."""
        with self._lock:
            pool = self.pools.get(name)
            if pool is not None or not self._membership.is_default(name):
                return pool
            if name not in self._default_pools:
                self._default_pools[name] = default_pool(name, self.default_spec)
            return self._default_pools[name]

    def _on_default(self, name: str, old: JSON | None, new: JSON | None) -> None:
        spec, error = defaults.spec_of(new)
        if error:
            log.error("cluster default policy: %s; the reference default applies", error)
        with self._lock:
            changed = spec != self.default_spec
            self.default_spec, self.default_error = spec, error
            self._pools_changed()
        if changed and self.node_informer.synced.is_set():
            self._reindex_all()

    def member_nodes(self, pool: str, among: Iterable[str] | None = None) -> list[tuple[str, JSON]]:
        """The pool's members (only those ``among`` the names given, when given) with their
        stored objects; the work is the pool's size (or the names'), never the fleet's."""
        with self._lock:
            if among is None:
                names = list(self._members.get(pool, ()))
            else:
                names = [n for n in among if self._node_pool.get(n) == pool]
        out = []
        for name in names:
            node = self.node_informer.get(name)
            if node is not None:
                out.append((name, node))
        return out

    def track_members(self) -> MemberChanges:
        """A new consumer of the pools' member changes, marked from now on."""
        tracker = MemberChanges(self._lock)
        with self._lock:
            self._trackers.append(tracker)
        return tracker

    def members(self, pool: str) -> set[str]:
        with self._lock:
            return set(self._members.get(pool, ()))

    def counts(self, pool: str) -> tuple[int, int]:
        """(members, faulty members) without copying the sets: the breaker asks on every reconcile."""
        with self._lock:
            return len(self._members.get(pool, ())), len(self._faulty.get(pool, ()))

    def is_faulty(self, pool: str, node: str) -> bool:
        with self._lock:
            return node in self._faulty.get(pool, ())

    def faulty(self, pool: str) -> set[str]:
        with self._lock:
            return set(self._faulty.get(pool, ()))

    def _same_spec(self, obj: JSON) -> Pool | None:
        """The pool parsed from ``obj``'s spec, when it is the one already parsed: a status
        write (the pool's own reconcile, every burst of faults) changes only the object."""
        known = self.pools.get(obj["metadata"]["name"])
        if known is None or known.obj.get("spec") != obj.get("spec"):
            return None
        return replace(known, obj=obj)

    def _on_pool(self, name: str, old: JSON | None, new: JSON | None) -> None:
        with self._lock:
            if new is None:
                self.pools.pop(name, None)
                self.invalid_pools.pop(name, None)
                self._pools_changed()
            elif (same := self._same_spec(new)) is not None:
                self.pools[name] = same  # the membership rule and the default pools stand
            else:
                try:
                    self.pools[name] = parse_pool(new)
                    self.invalid_pools.pop(name, None)
                except PoolConfigError as e:
                    log.error("GpuNodePool %s ignored: %s", name, e)
                    self.pools.pop(name, None)
                    self.invalid_pools[name] = str(e)
                self._pools_changed()
            spec_changed = (old or {}).get("spec") != (new or {}).get("spec")
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
        with self._lock:
            same = self._same_spec(obj)
            if same is not None:
                self.pools[same.name] = same
                return
        try:
            parsed = parse_pool(obj)
        except PoolConfigError:
            return
        with self._lock:
            self.pools[parsed.name] = parsed
            self._pools_changed()

    def _reindex_all(self) -> None:
        for node in self.node_informer.items():
            name = node["metadata"]["name"]
            if self._sharded:
                ours, owned = self._is_indexed(name), self._owns_node(name, node)
                if not owned:
                    if ours:
                        self._forget_node(name)
                    continue
                if not ours:
                    self._index_node(name, node)
                    self._enqueue(name)  # came to this shard (a pool's spec or the default policy changed)
                    continue
            self._index_node(name, node)

    # --- shards ------------------------------------------------------------------------------
    def owns_pool(self, pool: str) -> bool:
        return self.shard.owns(pool)

    def _owns_node(self, name: str, node: JSON) -> bool:
        """The node's repair in progress is of one of this shard's pools, or it has none and the
        membership rule puts it in one of them, or in no pool and its name hashes to this shard."""
        repairs = self._repairs.get(name)
        if repairs:
            return any(self.shard.owns(pool) for pool in repairs.values())
        pool = self._membership.pool_of(node)
        return self.shard.owns_unpooled(name) if pool is None else self.shard.owns(pool)

    def owns(self, key: str) -> bool:
        """Whether a work-queue key (a node's name or ``pool:<name>``) is this shard's to reconcile."""
        if not self._sharded:
            return True
        if key.startswith(POOL_KEY):
            return self.shard.owns(key[len(POOL_KEY):])
        node = self.node_informer.get(key)
        if node is not None:
            return self._owns_node(key, node)
        return any(self.shard.owns(pool) for pool in self._repairs.get(key, {}).values())

    def _is_indexed(self, name: str) -> bool:
        with self._lock:
            return name in self._prints or name in self._node_pool

    def _forget_node(self, name: str) -> None:
        """A node that went to another shard: out of the indexes, as if deleted."""
        self._index_node(name, None)
        with self._lock:
            self._prints.pop(name, None)
            self._faults.pop(name, None)

    def _track_repairs(self, name: str, node: str, pool: str, new: JSON | None) -> bool:
        """Keeps ``_repairs`` in step with one record of any shard; True when the node's set of
        pools with a repair in progress changed (its shard may have)."""
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

    def _refilter(self, name: str) -> None:
        """The node's shard may have changed (a repair of it began or ended): taken in, or let go."""
        node = self.node_informer.get(name)
        if node is None:
            return
        owned, ours = self._owns_node(name, node), self._is_indexed(name)
        if owned and not ours:
            self._on_node(name, None, node)
        elif ours and not owned:
            self._on_node(name, node, None)

    # --- nodes -------------------------------------------------------------------------------
    def _index_node(self, name: str, node: JSON | None) -> tuple[str, str]:
        pool = self.pool_for(node) if node is not None else None
        with self._lock:
            before = self._node_pool.pop(name, "")
            if before:
                self._members[before].discard(name)
                self._faulty[before].discard(name)
            if pool is not None and node is not None:
                self._node_pool[name] = pool.name
                self._members[pool.name].add(name)
                if self._repairable(node, pool):
                    self._faulty[pool.name].add(name)
            for tracker in self._trackers:
                for changed in {before, pool.name if pool else ""} - {""}:
                    tracker.mark(changed, name)
        return before, pool.name if pool else ""

    def _fingerprint(self, node: JSON | None) -> tuple[Any, ...] | None:
        """What a reconcile can react to; kubelet/kwok heartbeats (condition times) are not in it,
        nor the taints others set (the node lifecycle controller's ``not-ready``, ``unreachable``
        and ``unschedulable`` taints come and go with every reset and cordon): of the taints a
        reconcile reads only the maintenance taint, and a patch of the taints tests the stored
        node, which is always the latest version whatever its fingerprint. Compared by equality
        only (the dicts in it are the node's own, not copies, except a spec with taints)."""
        if node is None:
            return None
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        spec: Any = node.get("spec") or {}
        if "taints" in spec:
            key = self._taint_key
            spec = ({k: v for k, v in spec.items() if k != "taints"},
                    [t for t in spec["taints"] or () if t.get("key") == key])
        else:
            spec = (spec, [])
        try:
            conds = sorted(map(_CONDITION_FIELDS, status.get("conditions") or []))
        except KeyError:  # a condition without a reason or a message: the missing ones read as ""
            conds = sorted((c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                           for c in status.get("conditions") or [])
        return (meta.get("labels"), meta.get("annotations"), spec, conds,
                (status.get("nodeInfo") or {}).get("bootID"), meta.get("deletionTimestamp"))

    def _on_node(self, name: str, old: JSON | None, new: JSON | None) -> None:
        if self._sharded and (new is None or not self._owns_node(name, new)):
            if not self._is_indexed(name):
                return  # another shard's node (or never indexed): nothing here
            new = None  # left this shard (or deleted): out of the indexes, as if deleted
        # The previous version's fingerprint is kept, so a heartbeat costs one fingerprint, not two.
        fingerprint = self._fingerprint(new)
        with self._lock:
            seen = self._prints.pop(name, None) if new is None else self._prints.get(name)
            if new is not None:
                self._prints[name] = fingerprint
            else:
                self._faults.pop(name, None)
        # No fingerprint kept (the last version's indexing raised, or its event is still on its
        # way): indexed in full, whatever changed.
        if old is not None and new is not None and seen is not None and fingerprint is not None:
            if seen == fingerprint:
                return  # a heartbeat: nothing a repair depends on changed
            if seen[0] == fingerprint[0] and seen[3] == fingerprint[3]:
                # The same labels and conditions (only annotations, spec, boot id...): the same pool
                # and the same fault, so the indexes stand (the pools' changes re-index every node).
                with self._lock:
                    pool = self._node_pool.get(name, "")
                    if pool:
                        for tracker in self._trackers:
                            tracker.mark(pool, name)
                self._enqueue(name)
                return
        with self._lock:  # as indexed from the version seen last (the pools' changes re-index every node)
            was = self._node_pool.get(name, "")
            was_faulty = old is not None and name in self._faulty.get(was, ())
        try:
            before, after = self._index_node(name, new)
        except Exception:
            with self._lock:  # not indexed: the node's next event, even a heartbeat, indexes it again
                self._prints.pop(name, None)
            raise
        self._enqueue(name)
        now_faulty = self.is_faulty(after, name) if after else False
        if before != after or was_faulty != now_faulty or new is None:
            for pool in {before, after} - {""}:
                self._enqueue_pool(POOL_KEY + pool)

    def node(self, name: str) -> JSON | None:
        return self.node_informer.get(name)

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

    def pool_name_of_node(self, name: str) -> str:
        with self._lock:
            return self._node_pool.get(name, "")

    # --- records -----------------------------------------------------------------------------
    def _on_record(self, name: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old or {}
        node = (obj.get("spec") or {}).get("node", "")
        pool = (obj.get("spec") or {}).get("pool", "")
        if self._sharded:
            mine = self.shard.owns(pool)
            if not mine and node:
                with self._lock:
                    if new is None:
                        self._foreign_records[node].discard(name)
                        if not self._foreign_records[node]:
                            del self._foreign_records[node]
                    else:
                        self._foreign_records[node].add(name)
            if self._track_repairs(name, node, pool, new) and node:
                self._refilter(node)
            if not mine:
                return  # another shard's record
        with self._lock:
            if new is None:
                self._records_by_node[node].discard(name)
            else:
                self._records_by_node[node].add(name)
            self._index_record(name, pool)
        if new is None:
            self._written_rv.pop(name, None)
        elif new["metadata"].get("resourceVersion") in (self._written_rv.get(name),
                                                        (old or {}).get("metadata", {}).get("resourceVersion")):
            # Our own write (its echo, or an older event that came after it: the store keeps
            # ours), or a version already seen: nothing new to look at.
            return
        if node:
            self._enqueue(node)
        was_active = old is not None and rec.is_active(old)
        if was_active and (new is None or not rec.is_active(new)):
            pool = (obj.get("spec") or {}).get("pool", "")
            self.wake_held(pool)  # a slot may have freed

    def _index_record(self, name: str, pool: str) -> None:
        """Keeps the pool's set of records in progress in step with the store; called under the lock
        after every change of the store, so it always reads the version the store kept."""
        stored = self.record_informer.get(name)
        phase = rec.phase_of(stored) if stored is not None else None
        if stored is not None and phase in IN_PROGRESS:
            self._busy[pool].add(name)
        else:
            self._busy[pool].discard(name)
        if stored is not None and (phase is None or phase in PRE_START):
            self._waiting[pool][name] = (stored.get("spec") or {}).get("node", "")
        else:
            self._waiting[pool].pop(name, None)

    def wake_held(self, pool: str) -> None:
        """A slot may have freed (or the breaker closed): the pool's repairs not yet started look again.
        Repairs already in progress wait for no slot, so they are not woken."""
        with self._lock:
            nodes = set(self._waiting.get(pool, {}).values())
        for node in nodes:
            self._enqueue(node)

    def record_deleted(self, name: str) -> None:
        """A record found deleted by our own write (a 404): out of the store and the indexes now."""
        old = self.record_informer.get(name)
        self.record_informer.remove(name)
        if old is not None:
            self._on_record(name, old, None)

    def record_written(self, obj: JSON) -> None:
        self.record_informer.upsert(obj)
        self._written_rv[obj["metadata"]["name"]] = obj["metadata"].get("resourceVersion")
        node = (obj.get("spec") or {}).get("node", "")
        pool = (obj.get("spec") or {}).get("pool", "")
        with self._lock:
            self._records_by_node[node].add(obj["metadata"]["name"])
            self._index_record(obj["metadata"]["name"], pool)

    def records_of(self, node: str) -> list[JSON]:
        """The node's records of this shard's pools; sharded, for a node of this shard, also its
        closed records of other shards' pools (a node that moved between pools, or left every
        pool), so its history is the one an unsharded controller sees: the attempt budget and
        the last reset count its repairs in every pool, and the next record's name (which counts
        the node's records) is never one a record of another pool already has. Another shard's
        record in progress is never read here: the node is that shard's until it ends."""
        foreign: list[str] = []
        with self._lock:
            names = list(self._records_by_node.get(node, ()))
            if self._sharded and node in self._foreign_records and node in self._prints:  # indexed here
                foreign = list(self._foreign_records[node])
        out = [r for r in (self.record_informer.get(n) for n in names) if r is not None]
        out += [r for r in (self.record_informer.get(n) for n in foreign) if r is not None and not rec.is_active(r)]
        return sorted(out, key=lambda r: r["metadata"].get("creationTimestamp", ""))

    def in_progress(self, pool: str, exclude: str = "") -> int:
        """Records of the pool in Draining/Acting/Verifying, plus slots reserved by starts
        whose record write is still on its way."""
        with self._lock:
            busy = self._busy.get(pool, set()) | self._reserved.get(pool, set())
        busy.discard(exclude)
        return len(busy)

    def reserve(self, pool: str, record: str) -> None:
        with self._lock:
            self._reserved[pool].add(record)

    def unreserve(self, pool: str, record: str) -> None:
        with self._lock:
            self._reserved[pool].discard(record)
