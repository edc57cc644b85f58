"""Which nodes are this shard's: a repair in progress binds a node to its pool's shard, else the
membership rule, else the node's name; the other shards' records of a node are kept by name."""

from __future__ import annotations

import threading
from typing import Any

from autoclusters.controller.shard_ownership import ShardOwnership
from autoclusters.controller.shards import Shard, shard_of_node
from tests.unit import builders
from tests.unit.controller.test_shards import pool_in

JSON = dict[str, Any]


def _record(name: str, node: str, pool: str, phase: str) -> JSON:
    return builders.record(name, node, pool, phase=phase)


def test_a_repair_in_progress_binds_the_node_to_its_pools_shard_until_it_ends() -> None:
    mine, theirs = pool_in(0, 2), pool_in(1, 2)
    labels: dict[str, str | None] = {"n1": mine}
    own = ShardOwnership(Shard(2, 0), threading.RLock(), lambda node: labels[node["metadata"]["name"]])
    node: JSON = {"metadata": {"name": "n1"}}
    assert own.sharded and own.owns_node("n1", node) and own.owns_pool(mine) and not own.owns_pool(theirs)
    # another shard's repair of the node begins: the node is that shard's, whatever its labels say
    assert own.note_record("r1", "n1", theirs, _record("r1", "n1", theirs, "Draining")) == (False, True)
    assert not own.owns_node("n1", node) and not own.owns_absent_node("n1")
    assert own.foreign_records("n1") == ["r1"]
    assert own.note_record("r1", "n1", theirs, _record("r1", "n1", theirs, "Acting")) == (False, False)
    # it ends: the labels decide again, and the closed record is kept as the node's history
    assert own.note_record("r1", "n1", theirs, _record("r1", "n1", theirs, "Succeeded")) == (False, True)
    assert own.owns_node("n1", node) and own.foreign_records("n1") == ["r1"]
    assert own.note_record("r1", "n1", theirs, None) == (False, False)
    assert own.foreign_records("n1") == []
    # our own repair of a node that is gone from the store
    assert own.note_record("r2", "gone", mine, _record("r2", "gone", mine, "Draining")) == (True, True)
    assert own.owns_absent_node("gone") and own.foreign_records("gone") == []
    # in no pool and no repair: the name decides
    labels["n2"] = None
    assert own.owns_node("n2", {"metadata": {"name": "n2"}}) == (shard_of_node("n2", 2) == 0)


def test_unsharded_everything_is_ours_and_no_foreign_record_is_read() -> None:
    own = ShardOwnership(Shard(), threading.RLock(), lambda node: None)
    assert not own.sharded and own.owns_pool("any") and own.owns_node("n1", {"metadata": {"name": "n1"}})
    assert own.foreign_records("n1") == []
