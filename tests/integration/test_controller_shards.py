"""Sharding by pool against the real API server: two controllers with ``--shards 2`` each lead
their own Lease, each repairs only its own pool's node, and neither leads while the unsharded
layout does (a change of N waits for the old layout); the marks a repair left on a node that
then left every pool are removed by the shard the node's name hashes to."""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator

import pytest

from autoclusters.controller.shards import lease_name, shard_of, shard_of_node
from autoclusters.deploy.controller import LEASE_NAME
from autoclusters.kube import NotFound
from autoclusters.names import EVENT_SUCCEEDED
from tests.integration.controller_support import ControllerProcess, Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def holder(ctl: Env, lease: str) -> str:
    with contextlib.suppress(NotFound):
        path = f"/apis/coordination.k8s.io/v1/namespaces/{ctl.namespace}/leases/{lease}"
        return str((ctl.kube.get(path).get("spec") or {}).get("holderIdentity") or "")
    return ""


def holds(ctl: Env, lease: str, identity: str) -> bool:
    return holder(ctl, lease) == identity


def waiting(c: ControllerProcess) -> bool:
    return "not leading while another shard layout leads" in c.log()


def pool_nodes_counted(ctl: Env, pool: str) -> bool:
    return (ctl.get_pool(pool).get("status") or {}).get("nodes") == 1


def leave_marked_in_no_pool(ctl: Env, node: str) -> None:
    """What a crash right after the repair closed leaves (our label and taint, the cordon), with
    the node's pool label removed in the same write."""
    taints = (ctl.node(node).get("spec") or {}).get("taints") or []
    labels = {ctl.names.maintenance_required: "true", ctl.names.pool_label: None}
    ctl.kube.patch_node(node, {"metadata": {"labels": labels}, "spec": {"unschedulable": True, "taints": [
        *taints, {"key": ctl.names.taint_key, "value": "true", "effect": "PreferNoSchedule"}]}})


def clean(ctl: Env, node: str) -> bool:
    obj = ctl.node(node)
    return ctl.names.maintenance_required not in obj["metadata"].get("labels", {}) \
        and not ctl.has_taint(node) and not (obj.get("spec") or {}).get("unschedulable")


@pytest.fixture()
def shards(ctl: Env) -> Iterator[list[ControllerProcess]]:
    """Two shard controllers beside the session's unsharded one (which the test stops); the
    session's single controller is back afterwards."""
    started = [ctl.start_controller(f"shard-{i}", shards="2", shard=str(i)) for i in range(2)]
    try:
        yield started
    finally:
        for c in started:
            c.terminate()
        ctl.ensure_one_controller()


def test_two_shards_lead_their_own_leases_and_repair_only_their_own_pools(ctl: Env,
                                                                         shards: list[ControllerProcess]) -> None:
    leases = [lease_name(LEASE_NAME, 2, i) for i in range(2)]
    # the unsharded layout leads: the shards wait for it to be gone
    for c in shards:
        wait_for(f"{c.identity} waits for the other layout",
                 functools.partial(waiting, c), timeout=30)
    assert [holder(ctl, lease) for lease in leases] == ["", ""]
    assert ctl.leader()  # the unsharded lease is held
    for c in ctl.running():
        if c not in shards:
            c.terminate()  # a clean stop releases the unsharded lease
    for i, lease in enumerate(leases):
        wait_for(f"shard {i} leads {lease}", functools.partial(holds, ctl, lease, f"shard-{i}"), timeout=30)
    # one pool of each shard, with one node each
    pools: dict[int, str] = {}
    while len(pools) < 2:
        name, _ = ctl.pool("auto", nodes=0)
        pools.setdefault(shard_of(name, 2), name)
    # each node named so that, once in no pool, it is the other shard's (shard_of_node)
    prefixes = {i: next(p for j in itertools.count() if shard_of_node(f"{(p := f'{pool}-{j}')}-0", 2) != i)
                for i, pool in pools.items()}
    nodes = {i: ctl.create_gpu_nodes(pool, 1, prefix=prefixes[i])[0] for i, pool in pools.items()}
    for node in nodes.values():
        ctl.raise_fault(node)
    for i, node in nodes.items():
        record = ctl.record_in(node, "Succeeded", timeout=60)
        assert record["status"]["action"] == "reset" and record["status"]["attempts"] == 1
        assert ctl.watcher.boot_changes.get(node) == 1
        # every event of the repair came from the pool's own shard (events are written by a
        # background sender, one queue per object in emit order: once the last is there, all are)
        ctl.wait_reason(node, EVENT_SUCCEEDED)
        instances = {e.get("reportingInstance") for e in ctl.events(node)}
        assert instances == {f"shard-{i}"}, (node, instances)
        # and its pool's status too: written by its shard only (the other never reconciles it)
        wait_for(f"pool {pools[i]} status", functools.partial(pool_nodes_counted, ctl, pools[i]))
    for i, c in enumerate(shards):
        other = nodes[1 - i]
        assert f"node {other} record" not in c.log(), f"shard {i} acted on the other shard's node {other}"
    # Each node left marked as a crash right after its repair closed would leave it, and put in
    # no pool: the other shard, which its name hashes to, removes the marks and the cordon (the
    # closed record, of the pool's shard, says the repair cordoned it).
    for node in nodes.values():
        leave_marked_in_no_pool(ctl, node)
    for node in nodes.values():
        wait_for(f"{node} unmarked and uncordoned", functools.partial(clean, ctl, node), timeout=30)


def test_a_change_of_layout_resumes_the_repair_in_progress_on_the_pools_new_shard(
        ctl: Env, shards: list[ControllerProcess]) -> None:
    """The unsharded controller is replaced by two shards mid-repair (a change of N, rolled as
    stop-old/start-new): the shard that owns the pool now carries the repair on from its record,
    without a second reset, and the other shard never touches it."""
    pool, (node,) = ctl.pool("auto", provider={"type": "simulated", "simulated": {"resetSeconds": 6}})
    owner = shard_of(pool, 2)
    ctl.raise_fault(node)
    ctl.record_in(node, "Acting", timeout=30)  # the unsharded controller started the reset
    for c in ctl.running():
        if c not in shards:
            c.terminate()
    wait_for(f"shard {owner} leads", functools.partial(holds, ctl, lease_name(LEASE_NAME, 2, owner),
                                                       f"shard-{owner}"), timeout=30)
    record = ctl.record_in(node, "Succeeded", timeout=60)
    assert record["status"]["attempts"] == 1 and [s["phase"] for s in record["status"]["steps"]].count("Acting") == 1
    assert ctl.watcher.boot_changes.get(node) == 1  # resumed, not reset again
    ctl.wait_reason(node, EVENT_SUCCEEDED)  # written by a background sender, after the record
    finishers = {e.get("reportingInstance") for e in ctl.events(node) if e.get("reason") == EVENT_SUCCEEDED}
    assert finishers == {f"shard-{owner}"}, finishers
    assert record["metadata"]["name"] not in shards[1 - owner].log()
