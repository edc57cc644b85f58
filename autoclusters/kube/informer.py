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
- every list is counted by why it was made (``lists``, by ``LIST_REASONS``: the informer's
  start, a 410, any other error), which ``kube/informer_metrics`` exports: a fresh list after
  an API server restart or an etcd compaction shows there;
- a handler that raises on one object is that object's error alone: it is logged with the
  object's name and counted (``handler_errors``, which every process that runs informers
  exports through ``kube/informer_metrics``), and the other objects of the list, the later
  events and the watch go on. The store keeps the object as the API server sent it, and the handler
  gets it again at its next event or list, so one object the handler cannot take (a
  poison object) never stalls the others under the backoff;
- a ``transform`` that raises on one object is that object's error alone too, logged and
  counted the same way: that version is not taken in (the store keeps what it held of the
  object, the last version that transformed or nothing, and the handler hears nothing), the
  watch goes on without a list, and the object is taken in at its next event or list that
  transforms. Its deletion is never lost: a deletion event needs only the name.

A fresh list replaces the store and reports the difference through the handler: every
listed object as added or changed, every object that vanished meanwhile as deleted.
``transform`` trims each object before it is stored (client-go's transform function), so a
reader that needs three fields of a node does not keep thousands of whole nodes in memory;
it must keep ``metadata.name`` and ``metadata.resourceVersion``.

The store and the handler never go back in time:

- an event (or a listed object) older than the version the store holds (our own write,
  ``upsert``, got there before the watch told of an earlier change) leaves the store as it
  is, and the handler is handed the store's version as the new one, with the older object as
  the old one, never the older object as the new one. It still hears of the change (our
  write may carry someone else's change it acted without seeing);
- an object the store holds that a list does not is gone only when the store's version is
  not newer than the list's: one we wrote (created) after the list was answered stays, is
  handed over unchanged (old and new the same), never as deleted; the watch, which starts at
  the list's version, tells of anything that happens to it later, its deletion included;
- an object we removed ourselves (``remove``) does not come back through a list answered
  before the deletion or a watch event that lags behind it (a copy as old as the one removed
  or older); a newer one (the name created again) is taken in;
- a deletion event older than the version the store holds (the name was created again and our
  write of the new object, ``upsert``, got there before the watch told of the old one's
  deletion) leaves the store's object where it is: the handler is handed it unchanged (old and
  new the same), never as deleted, and the watch tells of the new object's own changes later.
  A deletion event carries the version of the deletion, newer than every version of the object
  it deleted and older than any object created under the name after it, so the version alone
  decides; the uid is not needed (and a ``transform`` may drop it). Nor does such an event
  undo our own removal of the newer object (its lagging copies stay out).

Versions are compared as integers (etcd's revisions), in one place (``_newer``); a version
that is not an integer is newer and older than none, so then the latest word wins, the API
server's or our own write's, as in an informer that compares nothing.
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
# Why an informer listed: its start, a watch whose version expired (410 Gone: etcd compacted past
# it, or the API server's watch cache no longer holds it), any other error of the list or the watch.
LIST_INITIAL, LIST_EXPIRED, LIST_ERROR = "initial", "expired", "error"
LIST_REASONS = (LIST_INITIAL, LIST_EXPIRED, LIST_ERROR)
# How long each watch runs before the API server ends it and it is resumed (``watch_timeout``).
WATCH_SECONDS = 240
Handler = Callable[[str, JSON | None, JSON | None], None]  # (name, old, new); new None = deleted
Transform = Callable[[JSON], JSON]


def _as_version(value: object) -> int | None:
    """A resourceVersion as etcd's revision; None when it is not an integer."""
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def _version(obj: JSON | None) -> int | None:
    return _as_version(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def _newer(a: int | None, b: int | None) -> bool:
    """Version ``a`` is newer than version ``b``: the module's one comparison of versions. A
    version that is not an integer is newer and older than none, so the latest word wins."""
    return a is not None and b is not None and a > b


def _older(obj: JSON, than: JSON | None) -> bool:
    """``obj`` is an older version than ``than`` (the store's), by resourceVersion."""
    return than is not None and _newer(_version(than), _version(obj))


def _before_removal(obj: JSON, removed: int | None) -> bool:
    """``obj`` is the version we removed or an older one: a copy of the object as it was before
    our removal, never a later one (an object created again under the name is newer)."""
    version = _version(obj)
    return removed is not None and version is not None and not _newer(version, removed)


def without_managed_fields(obj: JSON) -> JSON:
    """A transform: the object without ``metadata.managedFields`` (server-side apply's record of
    which manager set which field), removed in place. No reader of ours uses them, and they are
    about half of a node's memory (18.6 KiB a node, 8.7 KiB without, on the local cluster:
    docs/benchmarks/soak.md); client-go's informers strip them the same way."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _name(obj: JSON) -> str:
    """The object's name as the API server sent it, for a log line about an object we cannot take."""
    return str(((obj or {}).get("metadata") or {}).get("name") or "an object without a name")


class Informer:
    def __init__(self, kube: Kube, path: str, handler: Handler, *, label_selector: str | None = None,
                 watch_timeout: int = WATCH_SECONDS, name: str = "", transform: Transform | None = None,
                 backoff: float = 1.0, max_backoff: float = 30.0, gather_seconds: float = 0.0) -> None:
        self._kube = kube
        self._gather = gather_seconds  # Kube.watch's: a burst's events read together
        self._path = path
        self._handler = handler
        self._selector = label_selector
        self._watch_timeout = watch_timeout
        self._transform = transform
        self._backoff = backoff
        self._max_backoff = max_backoff
        # changes of one object the transform or the handler raised on (the informer's thread writes
        # it; kube/informer_metrics reads it for the metric)
        self.handler_errors = 0
        # lists made, by why (LIST_REASONS; the informer's thread writes it, kube/informer_metrics reads it)
        self.lists = dict.fromkeys(LIST_REASONS, 0)
        self.name = name or path
        self._store: dict[str, JSON] = {}
        # name -> version of the copy we removed (``remove``), until the API server's word on
        # the name is newer than our removal (its deletion event, a list without it, a newer object)
        self._removed: dict[str, int] = {}
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
        """Our own write: keep it unless the store already holds a newer version (or we removed
        this version or a newer one). It is stored as the transform makes it, as a watched one is."""
        name = obj["metadata"]["name"]
        taken = self._take(obj)
        if taken is None:
            return  # the transform raised on it (logged): the watch brings this version or a newer one
        obj = taken
        with self._lock:
            if _before_removal(obj, self._removed.get(name)):
                return
            self._removed.pop(name, None)
            if not _older(obj, self._store.get(name)):
                self._store[name] = obj

    def remove(self, name: str) -> None:
        """Our own deletion: out of the store, and no copy as old as the one removed comes back
        (a list answered before the deletion, a watch event that lags behind it)."""
        with self._lock:
            gone = self._store.pop(name, None)
            version = _version(gone)
            if version is not None:
                self._removed[name] = version

    # --- the loop --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _relist(self) -> str:
        items, rv = self._kube.list_with_version(self._path, label_selector=self._selector)
        listed_at = _as_version(rv)
        fresh: dict[str, JSON] = {}
        untaken: set[str] = set()  # listed, but the transform raised on them
        for item in items:
            obj = self._take(item)
            if obj is None:
                untaken.add(_name(item))
            else:
                fresh[obj["metadata"]["name"]] = obj
        changes: list[tuple[str, JSON | None, JSON | None]] = []
        store: dict[str, JSON] = {}
        with self._lock:
            old, removed = self._store, self._removed
            # the removals the list cannot settle: it predates them (their deletion events are to
            # come) or it holds a copy the transform could not take
            self._removed = {name: removed[name] for name in untaken if name in removed}
            for name, obj in fresh.items():
                held = old.get(name)
                if _before_removal(obj, removed.get(name)):
                    self._removed[name] = removed[name]
                elif held is not None and _older(obj, held):  # our own write made since the list: it stays
                    store[name] = held
                    changes.append((name, obj, held))
                else:
                    store[name] = obj
                    changes.append((name, held, obj))
            for name, held in old.items():
                if name in fresh:
                    continue
                if name in untaken:  # not taken in this time: the store keeps what it held of it
                    store[name] = held
                elif _newer(_version(held), listed_at):  # our own write made after the list was answered
                    store[name] = held
                    changes.append((name, held, held))
                else:
                    changes.append((name, held, None))
            self._store = store
        for change in changes:
            self._deliver(*change)
        self.synced.set()
        return rv

    def _run(self) -> None:
        rv = ""
        why = LIST_INITIAL  # why the next list is made
        delay = self._backoff
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                    self.lists[why] += 1
                    delay = self._backoff
                for event in self._kube.watch(self._path, resource_version=rv, label_selector=self._selector,
                                              timeout_seconds=self._watch_timeout, gather_seconds=self._gather):
                    if self._stop.is_set():
                        return
                    rv = self._apply(event) or rv
            except KubeError as e:
                rv = ""
                if e.status == 410 or "too old" in str(e).lower():
                    log.info("%s: watch expired (%s), listing again", self.name, e)
                    why = LIST_EXPIRED
                    continue
                delay = max(delay, e.retry_after or 0.0)  # never sooner than the server asked
                why = LIST_ERROR
                log.warning("%s: list or watch failed (%s); listing again in %.1fs", self.name, e, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._max_backoff)
            except Exception:  # a bug of the informer's own must not kill it (one object's are caught per object)
                rv = ""
                why = LIST_ERROR
                log.exception("%s: unexpected error; listing again in %.1fs", self.name, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._max_backoff)

    def _apply(self, event: JSON) -> str:
        """One watch event into the store and the handler; returns the resourceVersion it carries."""
        raw = event.get("object") or {}
        kind = event.get("type")
        rv = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            return rv
        if kind == "DELETED":  # only the name and version are used: no transform, so no deletion is lost to one
            name = raw["metadata"]["name"]
            gone = _version(raw)  # the version of the deletion itself (etcd's revision of it)
            with self._lock:
                if not _newer(self._removed.get(name), gone):  # the deletion of what we removed, or later
                    self._removed.pop(name, None)
                old = self._store.get(name)
                new: JSON | None = None
                if _older(raw, old):  # an older object's: the name was created again, our write got here first
                    new = old
                else:
                    self._store.pop(name, None)
            self._deliver(name, old, new)
            return rv
        obj = self._take(raw)
        if obj is None:
            return rv
        name = obj["metadata"]["name"]
        new = obj
        with self._lock:
            if _before_removal(obj, self._removed.get(name)):
                return rv  # a copy from before our own deletion: its deletion event is to come
            self._removed.pop(name, None)
            old = self._store.get(name)
            if _older(obj, old):  # our own write got here first: it stays, and the handler sees it
                old, new = obj, old
            else:
                self._store[name] = obj
        self._deliver(name, old, new)
        return rv

    def _take(self, obj: JSON) -> JSON | None:
        """``obj`` as the store keeps it (the transform's); None when the transform raised on it:
        that version is not taken in (see the module's policy)."""
        if self._transform is None:
            return obj
        try:
            out = self._transform(obj)
            out["metadata"]["name"]  # the transform must keep the name
            return out
        except Exception:  # any transform bug: the other objects must still be taken in
            name = _name(obj)
            log.exception("%s: the transform failed on %s; the store keeps what it held of %s and takes it "
                          "in at its next change or list", self.name, name, name)
            self._count_error()
            return None

    def _deliver(self, name: str, old: JSON | None, new: JSON | None) -> None:
        """One change to the handler; its error is this object's alone (see the module's policy)."""
        try:
            self._handler(name, old, new)
        except Exception:  # any handler bug: the other objects must still be delivered
            log.exception("%s: the handler failed on %s; it gets %s again at its next change or list",
                          self.name, name, name)
            self._count_error()

    def _count_error(self) -> None:
        """One object's error, its transform's or its handler's (logged by the caller with its name)."""
        self.handler_errors += 1
