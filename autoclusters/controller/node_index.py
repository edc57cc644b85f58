"""The nodes' indexes: each node's pool, each pool's members and faulty members, the fingerprint
of each node's version last seen (the heartbeat filter), and the consumers of the pools'
member changes (``MemberChanges``)."""

from __future__ import annotations

import operator
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

JSON = dict[str, Any]
# The fields of a node condition a reconcile can react to (its times are heartbeats); read in
# one C call when the condition has all four, the common case.
_CONDITION_FIELDS = operator.itemgetter("type", "status", "reason", "message")


class MemberChanges:
    """The nodes of each pool changed since their consumer last took them: joined, left, or
    changed in what a reconcile can react to (``NodeIndex.fingerprint``); heartbeats are not
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


class NodeIndex:
    def __init__(self, lock: threading.RLock, taint_key: str) -> None:
        self._lock = lock  # the fleet's
        self._taint_key = taint_key
        self._node_pool: dict[str, str] = {}
        self._members: dict[str, set[str]] = defaultdict(set)
        self._faulty: dict[str, set[str]] = defaultdict(set)
        self._prints: dict[str, tuple[Any, ...] | None] = {}  # node -> fingerprint of the version last seen
        self._trackers: list[MemberChanges] = []

    # --- placement -----------------------------------------------------------------------------
    def place(self, name: str, pool: str, faulty: Callable[[], bool]) -> tuple[str, str]:
        """The node is now in ``pool`` ("": in none, or gone), faulty there when ``faulty()``
        says so (asked only for a node in a pool); (its pool before, its pool now)."""
        with self._lock:
            before = self._node_pool.pop(name, "")
            if before:
                self._members[before].discard(name)
                self._faulty[before].discard(name)
            if pool:
                self._node_pool[name] = pool
                self._members[pool].add(name)
                if faulty():
                    self._faulty[pool].add(name)
            for tracker in self._trackers:
                for changed in {before, pool} - {""}:
                    tracker.mark(changed, name)
        return before, pool

    def mark_changed(self, name: str) -> None:
        """The node changed in its pool (not its pool nor its fault): its trackers are told."""
        with self._lock:
            pool = self._node_pool.get(name, "")
            if pool:
                for tracker in self._trackers:
                    tracker.mark(pool, name)

    def track(self) -> MemberChanges:
        """A new consumer of the pools' member changes, marked from now on."""
        tracker = MemberChanges(self._lock)
        with self._lock:
            self._trackers.append(tracker)
        return tracker

    # --- reads ---------------------------------------------------------------------------------
    def pool_of(self, name: str) -> str:
        with self._lock:
            return self._node_pool.get(name, "")

    def member_names(self, pool: str, among: Iterable[str] | None = None) -> list[str]:
        """The pool's members (only those ``among`` the names given, when given)."""
        with self._lock:
            if among is None:
                return list(self._members.get(pool, ()))
            return [n for n in among if self._node_pool.get(n) == pool]

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

    # --- the heartbeat filter --------------------------------------------------------------------
    def is_printed(self, name: str) -> bool:
        """A version of the node was seen (and not deleted since)."""
        with self._lock:
            return name in self._prints

    def is_indexed(self, name: str) -> bool:
        with self._lock:
            return name in self._prints or name in self._node_pool

    def remember(self, name: str, fingerprint: tuple[Any, ...] | None, present: bool) -> tuple[Any, ...] | None:
        """The fingerprint of the version seen last before this one (None: none kept); the new
        version's is kept, or, the node gone (``present`` False), the node's is forgotten."""
        with self._lock:
            if not present:
                return self._prints.pop(name, None)
            seen = self._prints.get(name)
            self._prints[name] = fingerprint
            return seen

    def unprint(self, name: str) -> None:
        """Forget the node's fingerprint: its next event, even a heartbeat, indexes it in full."""
        with self._lock:
            self._prints.pop(name, None)

    def fingerprint(self, node: JSON | None) -> tuple[Any, ...] | None:
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
