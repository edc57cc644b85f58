"""The pools as the controller reads them: every GpuNodePool parsed (or why it is invalid), the
cluster default policy (``pools.default_pool``) and the pools it makes per label value, and
the membership rule (``pools.membership``) built from them all."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

from autoclusters import api
from autoclusters.api import ConsentMode
from autoclusters.controller.pool_policy import Pool, PoolConfigError, default_pool, parse_pool
from autoclusters.names import Names
from autoclusters.pools import default_pool as defaults
from autoclusters.pools.membership import Membership

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class PoolStore:
    def __init__(self, names: Names, lock: threading.RLock) -> None:
        self._names = names
        self._lock = lock  # the fleet's
        self.pools: dict[str, Pool] = {}
        self.invalid_pools: dict[str, str] = {}
        self._membership = Membership((), names)
        # the cluster default policy (pools.default_pool): its spec, why the ConfigMap was not
        # used ("" when it was, or when there is none), and the pools it made, by label value
        self.default_spec, self.default_error = defaults.spec_of(None)
        self._default_pools: dict[str, Pool | None] = {}

    @property
    def membership(self) -> Membership:
        """The membership rule of the pools as they are now (replaced, never changed, when they change)."""
        return self._membership

    def pool_for(self, node: JSON) -> Pool | None:
        """The node's pool by the membership rule (``pools.membership``), among the valid pools."""
        with self._lock:
            membership = self._membership
        name = membership.pool_of(node)
        return self.pool_named(name) if name else None

    def pool_named(self, name: str) -> Pool | None:
        """A GpuNodePool, or a pool label value under the cluster default policy."""
        with self._lock:
            pool = self.pools.get(name)
            if pool is not None or not self._membership.is_default(name):
                return pool
            if name not in self._default_pools:
                self._default_pools[name] = default_pool(name, self.default_spec)
            return self._default_pools[name]

    def _pools_changed(self) -> None:
        mode = self.default_spec.get("consentMode", api.DEFAULT_CONSENT_MODE)
        self._membership = Membership((p.config for p in self.pools.values()), self._names,
                                      default=mode != ConsentMode.OFF, invalid=self.invalid_pools)
        self._default_pools = {}

    def set_default(self, obj: JSON | None) -> bool:
        """The default policy's ConfigMap changed (None: deleted); True when its spec did."""
        spec, error = defaults.spec_of(obj)
        if error:
            log.error("cluster default policy: %s; the reference default applies", error)
        with self._lock:
            changed = spec != self.default_spec
            self.default_spec, self.default_error = spec, error
            self._pools_changed()
        return changed

    def _same_spec(self, obj: JSON) -> Pool | None:
        """The pool parsed from ``obj``'s spec, when it is the one already parsed: a status
        write (the pool's own reconcile, every burst of faults) changes only the object."""
        known = self.pools.get(obj["metadata"]["name"])
        if known is None or known.obj.get("spec") != obj.get("spec"):
            return None
        return replace(known, obj=obj)

    def apply(self, name: str, old: JSON | None, new: JSON | None) -> bool:
        """A GpuNodePool's event (``new`` None: deleted); True when its spec changed."""
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
            return (old or {}).get("spec") != (new or {}).get("spec")

    def written(self, obj: JSON) -> None:
        """Our own status write of a pool whose spec the store's copy already had."""
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
