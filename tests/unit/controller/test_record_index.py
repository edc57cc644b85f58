"""The records' indexes: per node, a pool's repairs in progress and those not yet started, and
our own writes (their echo is no news)."""

from __future__ import annotations

import threading
from typing import Any

from autoclusters.controller.record_index import RecordIndex
from tests.unit import builders

JSON = dict[str, Any]


def _record(name: str, node: str, pool: str, phase: str | None, rv: str = "1") -> JSON:
    return builders.record(name, node, pool, phase=phase or None, rv=rv)


def test_the_index_reads_the_version_the_store_keeps() -> None:
    store: dict[str, JSON] = {}
    index = RecordIndex(threading.RLock(), store.get)
    store["r1"] = _record("r1", "n1", "a", None)  # created, no phase yet: waiting for the guards
    index.update("r1", "n1", "a", True)
    assert index.names_of("n1") == ["r1"] and index.waiting_nodes("a") == {"n1"} and index.busy("a") == set()
    store["r1"] = _record("r1", "n1", "a", "Draining", "2")
    index.update("r1", "n1", "a", True)
    assert index.busy("a") == {"r1"} and index.waiting_nodes("a") == set()
    store["r1"] = _record("r1", "n1", "a", "Succeeded", "3")
    index.update("r1", "n1", "a", True)
    assert index.busy("a") == set() and index.waiting_nodes("a") == set() and index.names_of("n1") == ["r1"]
    del store["r1"]
    index.update("r1", "n1", "a", False)
    assert index.names_of("n1") == [] and index.busy("a") == set()


def test_our_own_write_and_a_version_seen_are_no_news_and_a_deletion_forgets_our_write() -> None:
    store: dict[str, JSON] = {}
    index = RecordIndex(threading.RLock(), store.get)
    ours = store["r1"] = _record("r1", "n1", "a", "Scheduled", "5")
    index.written(ours)
    assert index.names_of("n1") == ["r1"] and index.waiting_nodes("a") == {"n1"}
    assert not index.is_news("r1", None, _record("r1", "n1", "a", "Scheduled", "5"))  # the echo of our write
    assert not index.is_news("r1", _record("r1", "n1", "a", "Scheduled", "6"), _record("r1", "n1", "a", "Acting", "6"))
    assert index.is_news("r1", ours, _record("r1", "n1", "a", "Acting", "7"))  # another writer's version
    assert index.is_news("r1", ours, None)  # deleted: news, and our write is forgotten
    assert index.is_news("r1", None, _record("r1", "n1", "a", "Scheduled", "5"))
