"""The nodes' indexes: placement in a pool, faulty members, the heartbeat filter's fingerprints
and the consumers of member changes."""

from __future__ import annotations

import threading

from autoclusters.controller.node_index import NodeIndex
from autoclusters.names import Names

NAMES = Names()


def test_a_node_placed_moves_between_pools_and_its_trackers_hear_of_both() -> None:
    index = NodeIndex(threading.RLock(), NAMES.taint_key)
    changes = index.track()
    asked: list[str] = []

    def faulty() -> bool:
        asked.append("n1")
        return True

    assert index.place("n1", "a", faulty) == ("", "a") and asked == ["n1"]
    assert index.counts("a") == (1, 1) and index.is_faulty("a", "n1") and index.pool_of("n1") == "a"
    assert changes.take("a") == {"n1"} and changes.take("a") == set()
    assert index.place("n1", "b", lambda: False) == ("a", "b")
    assert index.counts("a") == (0, 0) and index.counts("b") == (1, 0) and index.faulty("b") == set()
    assert changes.take("a") == {"n1"} and changes.take("b") == {"n1"}
    assert index.member_names("b") == ["n1"] and index.member_names("b", among=["n1", "n2"]) == ["n1"]
    assert index.member_names("a", among=["n1"]) == []
    asked.clear()
    assert index.place("n1", "", faulty) == ("b", "") and asked == []  # in no pool: not asked
    assert index.members("b") == set() and index.pool_of("n1") == "" and changes.take("b") == {"n1"}
    index.place("n2", "b", lambda: False)
    changes.take("b")
    index.mark_changed("n2")
    index.mark_changed("n1")  # in no pool: nobody to tell
    assert changes.take("b") == {"n2"} and changes.take("") == set()


def test_the_fingerprints_kept_tell_a_heartbeat_from_a_change() -> None:
    index = NodeIndex(threading.RLock(), NAMES.taint_key)

    def node(beat: str, taints: list[dict[str, str]] | None = None) -> dict:
        return {"metadata": {"name": "n1", "labels": {"x": "1"}},
                "spec": {"taints": taints or []},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "ok", "lastHeartbeatTime": beat}]}}

    first = index.fingerprint(node("t0"))
    assert index.remember("n1", first, True) is None and index.is_printed("n1") and index.is_indexed("n1")
    assert index.fingerprint(node("t1")) == first  # a heartbeat
    others = index.fingerprint(node("t1", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]))
    assert others == first  # another controller's taint
    ours = index.fingerprint(node("t1", [{"key": NAMES.taint_key, "effect": "PreferNoSchedule"}]))
    assert ours != first
    assert index.remember("n1", ours, True) == first
    index.unprint("n1")
    assert not index.is_printed("n1") and index.remember("n1", first, True) is None
    assert index.remember("n1", None, False) == first and not index.is_indexed("n1")
