"""List + watch of one collection into an in-memory store, with a callback per change.

The store is what reconciles read, so they cost no API requests; writes of our own are
put back into it (``upsert``) so the next reconcile never acts on an older copy than the
one it wrote. A watch that ends is resumed from the last resourceVersion seen (bookmarks
keep it fresh); a 410 Gone (history compacted) or any error means a fresh list.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from autoclusters.kube import Kube, KubeError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Handler = Callable[[str, JSON | None, JSON | None], None]  # (name, old, new); new None = deleted


def _rv(obj: JSON | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion", 0))
    except ValueError:
        return 0


class Informer:
    def __init__(self, kube: Kube, path: str, handler: Handler, *, label_selector: str | None = None,
                 watch_timeout: int = 240, name: str = "") -> None:
        self._kube = kube
        self._path = path
        self._handler = handler
        self._selector = label_selector
        self._watch_timeout = watch_timeout
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
            old = self._store.get(name)
            if old is not None and _rv(old) > _rv(obj):
                return
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
        fresh = {i["metadata"]["name"]: i for i in items}
        with self._lock:
            old = self._store
            self._store = fresh
        for name, obj in fresh.items():
            self._handler(name, old.get(name), obj)
        for name, obj in old.items():
            if name not in fresh:
                self._handler(name, obj, None)
        self.synced.set()
        return rv

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                for event in self._kube.watch(self._path, resource_version=rv, label_selector=self._selector,
                                              timeout_seconds=self._watch_timeout):
                    if self._stop.is_set():
                        return
                    obj = event.get("object") or {}
                    kind = event.get("type")
                    new_rv = str((obj.get("metadata") or {}).get("resourceVersion", "")) or rv
                    rv = new_rv
                    if kind == "BOOKMARK":
                        continue
                    name = obj["metadata"]["name"]
                    with self._lock:
                        old = self._store.get(name)
                        if kind == "DELETED":
                            self._store.pop(name, None)
                        elif old is None or _rv(old) <= _rv(obj):
                            self._store[name] = obj
                    self._handler(name, old, None if kind == "DELETED" else obj)
            except KubeError as e:
                if e.status == 410 or "too old" in str(e).lower():
                    log.info("%s: watch expired, listing again", self.name)
                else:
                    log.warning("%s: watch failed (%s); listing again", self.name, e)
                    self._stop.wait(1.0)
                rv = ""
            except Exception:  # a handler bug must not kill the informer
                log.exception("%s: unexpected error; listing again", self.name)
                self._stop.wait(1.0)
                rv = ""
