"""The pools as the controller reads them: parsed once per spec, invalid ones named with why,
the default policy's pools, and the membership rule that places a node."""

from __future__ import annotations

import threading

from autoclusters.controller.pool_store import PoolStore
from autoclusters.names import Names

NAMES = Names()


def test_a_pool_is_parsed_once_per_spec_and_an_invalid_one_says_why() -> None:
    store = PoolStore(NAMES, threading.RLock())
    first = {"metadata": {"name": "a", "resourceVersion": "1"}, "spec": {}}
    assert store.apply("a", None, first) is True
    parsed = store.pools["a"]
    node = {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "a"}}}
    assert store.pool_for(node) is parsed and store.membership.pool_of(node) == "a"
    status = {**first, "metadata": {"name": "a", "resourceVersion": "2"}, "status": {"nodes": 1}}
    rule = store.membership
    assert store.apply("a", first, status) is False  # a status change: the same spec
    assert store.pools["a"].obj is status and store.pools["a"].config is parsed.config and store.membership is rule
    store.written({**status, "status": {"nodes": 2}})
    assert store.pools["a"].obj["status"] == {"nodes": 2} and store.membership is rule
    bad = {"metadata": {"name": "a"}, "spec": {"maxConcurrentRepairs": -1}}
    assert store.apply("a", status, bad) is True
    assert "a" not in store.pools and "maxConcurrentRepairs" in store.invalid_pools["a"]
    assert store.pool_for(node) is None
    assert store.apply("a", bad, None) is True and store.invalid_pools == {} and store.pools == {}


def test_a_label_value_naming_no_pool_is_a_pool_of_the_default_policy() -> None:
    store = PoolStore(NAMES, threading.RLock())
    node = {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "h100"}}}
    assert store.pool_for(node) is None  # the default policy not read yet: no pool
    assert store.set_default(None) is False  # no ConfigMap: the reference default, unchanged
    pool = store.pool_for(node)
    assert pool is not None and pool.default and pool.name == "h100"
    assert store.pool_named("h100") is pool  # made once per label value
    store.apply("a", None, {"metadata": {"name": "a"}, "spec": {}})
    again = store.pool_named("h100")
    assert again is not None and again is not pool and again.default  # made again after a change
