"""List + watch of one collection into an in-memory store, with a callback per change.

The store is what readers use, so reads cost no API requests; writes of our own are put
back into it (``upsert``) so the next reader never acts on an older copy than the one it
wrote. Every list-watch of the project (the controller's cache, the simulated detector
fleet, the Slurm bridge, the approval example) is this class, with one error policy:

- a watch the server ends (its timeout) is resumed from the last resourceVersion seen
  (bookmarks keep it fresh), without a new list;
- 410 Gone (the version is older than the server's history) means a fresh list at once;
- any other error (the API server unreachable, a refused request) means a fresh list after a
  backoff that doubles from ``backoff`` to ``max_backoff`` and starts again after a list
  succeeds;
- a handler that raises on one object is that object's error alone: it is logged with the
  object's name and counted (``handler_errors``, and ``on_handler_error`` with the
  informer's name, for a metric), and the other objects of the list, the later events and
  the watch go on. The store keeps the object as the API server sent it, and the handler
  gets it again at its next event or list, so one object the handler cannot take (a
  poison object) never stalls the others under the backoff.

A fresh list replaces the store and reports the difference through the handler: every
listed object as added or changed, every object that vanished meanwhile as deleted.
``transform`` trims each object before it is stored (client-go's transform function), so a
reader that needs three fields of a node does not keep thousands of whole nodes in memory;
it must keep ``metadata.name`` and ``metadata.resourceVersion``.

The store and the handler never go back in time: an event (or a listed object) older than the
version the store holds (our own write, ``upsert``, got there before the watch told of an
earlier change) leaves the store as it is, and the handler is handed the store's version as
the new one, with the older object as the old one, never the older object as the new one. It
still hears of the change (our write may carry someone else's change it acted without seeing).
Versions are compared as integers (etcd's); a version that is not one reads as 0, so such an
object never counts as newer than another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from autoclusters.kube.client import Kube
from autoclusters.kube.errors import KubeError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Handler = Callable[[str, JSON | None, JSON | None], None]  # (name, old, new); new None = deleted
Transform = Callable[[JSON], JSON]
ErrorHook = Callable[[str], None]  # called with the informer's name after its handler raised


def _rv(obj: JSON | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion", 0))
    except ValueError:
        return 0


def _older(obj: JSON, than: JSON | None) -> bool:
    """``obj`` is an older version than ``than`` (the store's), by resourceVersion."""
    return than is not None and _rv(than) > _rv(obj)


class Informer:
    def __init__(self, kube: Kube, path: str, handler: Handler, *, label_selector: str | None = None,
                 watch_timeout: int = 240, name: str = "", transform: Transform | None = None,
                 backoff: float = 1.0, max_backoff: float = 30.0, on_handler_error: ErrorHook | None = None) -> None:
        self._kube = kube
        self._path = path
        self._handler = handler
        self._selector = label_selector
        self._watch_timeout = watch_timeout
        self._transform = transform
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._on_handler_error = on_handler_error
        self.handler_errors = 0  # changes of one object the handler raised on (the informer's thread writes it)
        self.name = name or path
        self._store: dict[str, JSON] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- reads -----------------------------------------------------------------------
    def get(self, name: str) -> JSON | None:
        with self._lock:
            return self._store.get(name)

    def items(self) -> list[JSON]:
        with self._lock:
            return list(self._store.values())

    def upsert(self, obj: JSON) -> None:
        """Our own write: keep it unless the store already holds a newer version."""
        name = obj["metadata"]["name"]
        with self._lock:
            if not _older(obj, self._store.get(name)):
                self._store[name] = obj

    def remove(self, name: str) -> None:
        with self._lock:
            self._store.pop(name, None)

    # --- the loop --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _relist(self) -> str:
        items, rv = self._kube.list_with_version(self._path, label_selector=self._selector)
        if self._transform is not None:
            items = [self._transform(i) for i in items]
        fresh = {i["metadata"]["name"]: i for i in items}
        with self._lock:
            old = self._store
            listed = {name: obj for name, obj in fresh.items() if _older(obj, old.get(name))}
            fresh.update((name, old[name]) for name in listed)  # our own writes made since the list
            self._store = fresh
        for name, obj in fresh.items():
            self._deliver(name, listed.get(name) or old.get(name), obj)
        for name, obj in old.items():
            if name not in fresh:
                self._deliver(name, obj, None)
        self.synced.set()
        return rv

    def _run(self) -> None:
        rv = ""
        delay = self._backoff
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                    delay = self._backoff
                for event in self._kube.watch(self._path, resource_version=rv, label_selector=self._selector,
                                              timeout_seconds=self._watch_timeout):
                    if self._stop.is_set():
                        return
                    rv = self._apply(event) or rv
            except KubeError as e:
                rv = ""
                if e.status == 410 or "too old" in str(e).lower():
                    log.info("%s: watch expired, listing again", self.name)
                    continue
                log.warning("%s: list or watch failed (%s); listing again in %.1fs", self.name, e, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._max_backoff)
            except Exception:  # a bug (a transform that raised) must not kill the informer
                rv = ""
                log.exception("%s: unexpected error; listing again in %.1fs", self.name, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._max_backoff)

    def _apply(self, event: JSON) -> str:
        """One watch event into the store and the handler; returns the resourceVersion it carries."""
        obj = event.get("object") or {}
        kind = event.get("type")
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            return rv
        if self._transform is not None:
            obj = self._transform(obj)
        name = obj["metadata"]["name"]
        new: JSON | None = None if kind == "DELETED" else obj
        with self._lock:
            old = self._store.get(name)
            if new is None:
                self._store.pop(name, None)
            elif _older(obj, old):  # our own write got here first: it stays, and the handler sees it
                old, new = obj, old
            else:
                self._store[name] = obj
        self._deliver(name, old, new)
        return rv

    def _deliver(self, name: str, old: JSON | None, new: JSON | None) -> None:
        """One change to the handler; its error is this object's alone (see the module's policy)."""
        try:
            self._handler(name, old, new)
        except Exception:  # any handler bug: the other objects must still be delivered
            self.handler_errors += 1
            log.exception("%s: the handler failed on %s; it gets %s again at its next change or list",
                          self.name, name, name)
            if self._on_handler_error is not None:
                self._on_handler_error(self.name)
