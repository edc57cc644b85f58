"""The controller's cache of the cluster: what counts as a change, pool membership, counts."""

from __future__ import annotations

from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names

NAMES = Names()


def test_fleet_ignores_heartbeats_and_follows_the_membership_rule() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    fleet._on_pool("sel", None, {"metadata": {"name": "sel"},
                                 "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}})
    assert fleet.pool_for({"metadata": {"labels": {NAMES.pool_label: "a", "zone": "z1"}}}).name == "a"
    assert fleet.pool_for({"metadata": {"labels": {"zone": "z1"}}}).name == "sel"
    assert fleet.pool_for({"metadata": {"labels": {NAMES.pool_label: "sel"}}}) is None

    def node(beat: str, fault: bool) -> dict:
        cond = {"type": NAMES.gpu_condition, "status": "True" if fault else "False", "lastHeartbeatTime": beat,
                "reason": "NvidiaXIDError" if fault else "NoGpuFaultDetected",
                "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)." if fault else ""}
        return {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "a"}},
                "status": {"conditions": [cond, {"type": "Ready", "status": "True", "lastHeartbeatTime": beat}]}}

    fleet._on_node("n1", None, node("t0", False))
    assert fleet.counts("a") == (1, 0)
    queued.clear()
    fleet._on_node("n1", node("t0", False), node("t1", False))  # a heartbeat
    assert queued == []
    fleet._on_node("n1", node("t1", False), node("t2", True))  # a fault
    assert "n1" in queued and POOL_KEY + "a" in queued and fleet.counts("a") == (1, 1)
