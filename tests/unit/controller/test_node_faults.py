"""A node's active fault: read from its conditions through the catalog, kept per node object
while the store holds the node."""

from __future__ import annotations

import threading

from autoclusters.controller.node_faults import FaultReader
from autoclusters.controller.pool_policy import parse_pool
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names

NAMES = Names()
XID79 = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."


def _node(message: str) -> dict:
    return {"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": NAMES.gpu_condition, "status": "True", "reason": "NvidiaXIDError", "message": message}]}}


def test_the_answer_is_kept_per_node_object_only_while_the_store_holds_the_node() -> None:
    stored = {"n1"}
    reader = FaultReader(load_catalog(), NAMES, threading.RLock(), stored.__contains__)
    node = _node(XID79)
    ref, cond = reader.fault_of(node)
    assert ref is not None and ref.code == "79" and cond is node["status"]["conditions"][0]
    assert reader.remembers("n1") and reader.fault_of(node)[1] is cond
    reader.forget("n1")
    stored.clear()  # deleted: answered, not remembered
    assert reader.fault_of(node)[0] == ref and not reader.remembers("n1")
    assert reader.fault_of(None) == (None, None)
    assert reader.fault_of({"metadata": {"name": "n1"}}) == (None, None)  # no condition: no fault


def test_a_fault_is_repairable_only_by_a_pool_with_an_action_for_it() -> None:
    reader = FaultReader(load_catalog(), NAMES, threading.RLock(), lambda _name: True)
    pool = parse_pool({"metadata": {"name": "a"}, "spec": {}})
    assert reader.repairable(_node(XID79), pool)
    assert not reader.repairable(_node(XID79), None)
    assert not reader.repairable({"metadata": {"name": "n2"}}, pool)
