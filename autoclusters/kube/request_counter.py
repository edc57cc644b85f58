"""Counts a client's API requests by the part of the process that sent them and by
Kubernetes verb and resource, the way the API server's own metrics name them
(``get``/``list``/``watch``/``create``/``update``/``patch``/``delete``; ``nodes``,
``nodes/status``, ``pods/eviction``...). The controller exports the counts as a metric;
benchmarks read them to list the requests of one repair.

The part (``component``) tells the controller's own requests (``controller``: informers,
reconciles, events) from its leader election's (``leader-election``, on a timer, not per
repair) and each repair provider's (``provider/<type>``: what a provider sends to do its
work; a real provider sends most of it to its own backend instead)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_kind(method: str, path: str, query: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(verb, resource) of one request: ``("patch", "nodes/status")`` for
    ``PATCH /api/v1/nodes/n1/status``; a path outside the resource API is its own resource
    (``("get", "/version")``), discovery is ``discovery``."""
    method = method.upper()
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        return method.lower(), "/" + "/".join(parts)
    if not rest:
        return method.lower(), "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource; /namespaces and /namespaces/NAME stay namespaces
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    if method == "GET":
        if query and str(query.get("watch", "")).lower() in ("true", "1"):
            return "watch", resource
        return ("get" if named else "list"), resource
    if method == "DELETE":
        return ("delete" if named else "deletecollection"), resource
    return _VERBS.get(method, method.lower()), resource


_KINDS_MAX = 4096
CONTROLLER = "controller"
LEADER_ELECTION = "leader-election"


def provider_component(provider_type: str) -> str:
    return f"provider/{provider_type}"


@dataclass
class RequestCounter:
    """Thread-safe counts of requests by (component, verb, resource)."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # (component, method, path, a watch) -> the counted key: a repair sends to the same few paths
    # again and again (its record's status, its node, the events collection)
    _kinds: dict[tuple[str, str, str, bool], tuple[str, str, str]] = field(default_factory=dict, repr=False)

    # requests the API server's flow control refused (429 with Retry-After), by the same key
    throttled: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def add(self, method: str, path: str = "", query: Mapping[str, Any] | None = None, *,
            component: str = CONTROLLER) -> None:
        key = self._key(method, path, query, component)
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def add_throttled(self, method: str, path: str = "", query: Mapping[str, Any] | None = None, *,
                      component: str = CONTROLLER) -> None:
        """One request (already counted by ``add``) that flow control answered with 429."""
        key = self._key(method, path, query, component)
        with self._lock:
            self.throttled[key] = self.throttled.get(key, 0) + 1

    def _key(self, method: str, path: str, query: Mapping[str, Any] | None, component: str) -> tuple[str, str, str]:
        watch = bool(query) and str(query.get("watch", "")).lower() in ("true", "1")  # type: ignore[union-attr]
        seen = (component, method, path, watch)
        key = self._kinds.get(seen)
        if key is None:
            key = (component, *request_kind(method, path, query))
            if len(self._kinds) >= _KINDS_MAX:
                self._kinds.clear()
            self._kinds[seen] = key
        return key

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self.counts)

    def snapshot_throttled(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self.throttled)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())
