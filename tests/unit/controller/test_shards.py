"""Sharding the controller by pool: the shard function, the settings' validation, the leases,
the layout guard, and the cache's handlers dropping other shards' objects."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter

import pytest

from autoclusters.controller.shards import (
    LayoutGuard,
    Shard,
    ShardConfigError,
    check,
    layout_of,
    lease_name,
    shard_of,
    shard_of_node,
)
from autoclusters.faults.catalog import load_catalog
from autoclusters.names import Names
from autoclusters.pools import default_pool
from tests.unit import builders
from tests.unit.controller.harness import XID79, Harness
from tests.unit.fakeapi import FakeApi

NAMES = Names()
NS = "autoclusters-system"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


def pool_in(shard: int, shards: int, prefix: str = "pool") -> str:
    """The first name ``<prefix>-<i>`` that ``shard`` owns."""
    return next(name for i in itertools.count() if shard_of(name := f"{prefix}-{i}", shards) == shard)


# --- the shard function -----------------------------------------------------------------------
def test_a_pool_has_the_same_shard_in_every_process() -> None:
    """Python's own hash is randomized per process; the shard must not be."""
    pools = [f"pool-{i}" for i in range(50)] + ["h100", "a100", "ünicode"]
    here = [shard_of(p, 7) for p in pools]
    script = ("import sys; from autoclusters.controller.shards import shard_of; "
              f"print([shard_of(p, 7) for p in {pools!r}])")
    for seed in ("1", "2", "random"):
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, check=True).stdout
        assert out.strip() == str(here)


@pytest.mark.parametrize("shards", [2, 3, 4, 8])
def test_pools_spread_evenly_enough(shards: int) -> None:
    counts = Counter(shard_of(f"pool-{i}", shards) for i in range(2000))
    expected = 2000 / shards
    assert set(counts) == set(range(shards))
    assert all(abs(n - expected) < 0.15 * expected for n in counts.values()), counts


def test_one_shard_owns_everything() -> None:
    assert {shard_of(f"p{i}", 1) for i in range(100)} == {0}
    assert all(Shard().owns(f"p{i}") for i in range(100))


def test_each_pool_has_exactly_one_owner() -> None:
    shards = [Shard(3, i) for i in range(3)]
    for i in range(300):
        assert sum(s.owns(f"p{i}") for s in shards) == 1


def test_each_node_in_no_pool_has_exactly_one_owner_by_its_name() -> None:
    shards = [Shard(3, i) for i in range(3)]
    for i in range(300):
        owners = [s.shard for s in shards if s.owns_unpooled(f"node-{i}")]
        assert owners == [shard_of_node(f"node-{i}", 3)]
    assert Counter(shard_of_node(f"node-{i}", 3) for i in range(3000)).keys() == {0, 1, 2}
    assert all(Shard().owns_unpooled(f"node-{i}") for i in range(100))
    script = ("from autoclusters.controller.shards import shard_of_node; "
              "print([shard_of_node(f'node-{i}', 5) for i in range(50)])")
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": "random"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([shard_of_node(f"node-{i}", 5) for i in range(50)])


@pytest.mark.parametrize(("shards", "shard", "message"), [
    (0, 0, "--shards must be at least 1"),
    (2, 2, "between 0 and --shards - 1 = 1 (got 2)"),
    (2, -1, "between 0 and --shards - 1 = 1 (got -1)"),
])
def test_impossible_settings_are_refused_with_the_flags_named(shards: int, shard: int, message: str) -> None:
    with pytest.raises(ShardConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(shards, shard)
    with pytest.raises(ShardConfigError):
        Shard(shards, shard)


def test_the_cli_refuses_a_shard_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    from autoclusters.cli import main as cli

    assert cli.main(["controller", "run", "--shards", "2", "--shard", "2", "--kubeconfig", "/nonexistent"]) == 2
    assert "--shard must be between 0 and --shards - 1 = 1 (got 2)" in capsys.readouterr().err


def test_lease_names_keep_the_unsharded_one_and_name_the_layout() -> None:
    base = "autoclusters-controller"
    assert lease_name(base, 1, 0) == base  # an upgrade keeps its lease
    assert lease_name(base, 3, 1) == f"{base}-shard-1-of-3"
    assert layout_of(base, base) == 1
    assert layout_of(lease_name(base, 3, 1), base) == 3
    assert layout_of("other-shard-1-of-3", base) is None
    assert layout_of("kube-scheduler", base) is None


# --- the layout guard -------------------------------------------------------------------------
def _lease(api: FakeApi, name: str, holder: str, renew: str = "2026-01-01T00:00:00.000000Z") -> None:
    api.put(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                     "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew}})


def test_a_replica_does_not_lead_while_another_layout_leads() -> None:
    from autoclusters.clock import FakeClock

    clock = FakeClock()
    api = FakeApi(clock=clock.now)
    base = "autoclusters-controller"
    guard = LayoutGuard(api.kube(), clock, namespace=NS, base=base, shards=2)
    _lease(api, "kube-scheduler", "someone")  # not ours
    _lease(api, lease_name(base, 2, 1), "sibling")  # our own layout's other shard: no obstacle
    assert guard.may_lead()
    _lease(api, base, "old-unsharded")  # the layout before the change of N still leads
    assert not guard.may_lead()
    assert guard.foreign_holders() == [f"{base} (old-unsharded)"]
    clock.advance(10)
    assert not guard.may_lead()  # not renewed, but not expired either
    clock.advance(6)
    assert guard.may_lead()  # expired on this replica's clock: the old layout is gone
    _lease(api, base, "old-unsharded", renew="2026-01-01T00:00:20.000000Z")  # renewed: it still leads
    assert not guard.may_lead()
    _lease(api, base, "")  # released on a clean stop
    assert guard.may_lead()


def test_a_role_without_lease_list_keeps_an_unsharded_controller_working_and_stops_a_sharded_one() -> None:
    """An upgrade that has not re-applied the RBAC yet: the unsharded controller leads as before
    (no sharded layout can lead under that Role either); a sharded one does not lead blind."""
    from autoclusters.clock import FakeClock
    from tests.unit.fakeapi import ApiError, Request

    clock = FakeClock()
    api = FakeApi(clock=clock.now)

    def forbidden(req: Request) -> None:
        if req.verb == "LIST" and req.path.endswith("/leases"):
            raise ApiError(403, 'leases is forbidden: cannot list resource "leases"', "Forbidden")

    api.before.append(forbidden)
    base = "autoclusters-controller"
    assert LayoutGuard(api.kube(), clock, namespace=NS, base=base, shards=1).may_lead()
    assert not LayoutGuard(api.kube(), clock, namespace=NS, base=base, shards=2).may_lead()


def test_the_elector_does_not_campaign_while_told_not_to() -> None:
    import threading

    from autoclusters.clock import FakeClock
    from autoclusters.kube.leader import LeaderElector

    clock = FakeClock()
    api = FakeApi(clock=clock.now)
    asked = threading.Event()
    allowed = threading.Event()

    def may() -> bool:
        asked.set()
        return allowed.is_set()

    elector = LeaderElector(api.kube(), clock, namespace=NS, name="ctl-shard-0-of-2", identity="me",
                            retry_period=0.01, may_acquire=may)
    stop, started = threading.Event(), threading.Event()
    t = threading.Thread(target=elector.run, args=(stop, started.set, lambda: None), daemon=True)
    t.start()
    try:
        assert asked.wait(5)
        assert not started.wait(0.2) and api.read(f"{LEASES}/ctl-shard-0-of-2") is None
        allowed.set()
        assert started.wait(5)
        assert (api.read(f"{LEASES}/ctl-shard-0-of-2") or {})["spec"]["holderIdentity"] == "me"
    finally:
        stop.set()
        t.join(5)


# --- the cache's handlers ---------------------------------------------------------------------
def _node(name: str, pool: str, fault: bool = False) -> dict:
    conds = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]
    if fault:
        conds.append({"type": NAMES.gpu_condition, "status": "True", "reason": "NvidiaXIDError", "message": XID79})
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": {NAMES.pool_label: pool}},
            "status": {"conditions": conds}}


def _record(name: str, node: str, pool: str, phase: str, rv: str = "1") -> dict:
    return builders.record(name, node, pool, phase=phase, rv=rv)


def test_the_handlers_drop_other_shards_objects_before_any_index() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    mine, theirs = pool_in(0, 2), pool_in(1, 2)
    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append, shard=Shard(2, 0))  # type: ignore[arg-type]
    for pool in (mine, theirs):
        fleet._on_pool(pool, None, {"metadata": {"name": pool}, "spec": {}})
    assert queued == [POOL_KEY + mine]  # every pool parsed (membership needs them), only ours queued
    assert set(fleet.pools) == {mine, theirs}
    queued.clear()
    fleet._on_node("a", None, _node("a", mine, fault=True))
    fleet._on_node("b", None, _node("b", theirs, fault=True))
    assert fleet.counts(mine) == (1, 1) and fleet.counts(theirs) == (0, 0)
    assert not fleet.node_index.is_indexed("b")  # nothing kept of it
    assert "b" not in queued and POOL_KEY + theirs not in queued
    # a default-policy pool (a label value naming no GpuNodePool) shards by that value alike
    fleet._on_default("cfg", None, None)
    default_mine, default_theirs = pool_in(0, 2, "label"), pool_in(1, 2, "label")
    fleet._on_node("c", None, _node("c", default_mine))
    fleet._on_node("d", None, _node("d", default_theirs))
    assert fleet.members(default_mine) == {"c"} and fleet.members(default_theirs) == set()
    # a record of another shard's pool is not indexed
    fleet.record_informer.upsert(_record("r-b", "b", theirs, "Draining"))
    fleet._on_record("r-b", None, _record("r-b", "b", theirs, "Draining"))
    assert fleet.records_of("b") == [] and fleet.in_progress(theirs) == 0
    # the work-queue keys this shard takes
    fleet.node_informer.upsert(_node("a", mine))
    fleet.node_informer.upsert(_node("b", theirs))
    assert fleet.owns("a") and not fleet.owns("b")
    assert fleet.owns(POOL_KEY + mine) and not fleet.owns(POOL_KEY + theirs)


def test_a_node_relabelled_into_another_shards_pool_leaves_this_shard() -> None:
    from autoclusters.controller.cache import POOL_KEY, Fleet

    mine, theirs = pool_in(0, 2), pool_in(1, 2)
    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append, shard=Shard(2, 0))  # type: ignore[arg-type]
    for pool in (mine, theirs):
        fleet._on_pool(pool, None, {"metadata": {"name": pool}, "spec": {}})
    fleet._on_node("a", None, _node("a", mine, fault=True))
    queued.clear()
    fleet._on_node("a", _node("a", mine, fault=True), _node("a", theirs, fault=True))
    assert fleet.counts(mine) == (0, 0) and not fleet.node_index.is_printed("a")
    assert POOL_KEY + mine in queued  # its old pool's counts changed
    fleet._on_node("a", _node("a", theirs, fault=True), _node("a", mine, fault=True))
    assert fleet.counts(mine) == (1, 1)


def test_a_node_with_a_repair_in_progress_belongs_to_the_repairs_shard() -> None:
    """Relabelled into another shard's pool mid-repair: the repair's shard keeps the node until
    the repair ends, so the other shard never starts a second repair of it meanwhile."""
    from autoclusters.controller.cache import Fleet

    mine, theirs = pool_in(0, 2), pool_in(1, 2)
    fleets = [Fleet(object(), NAMES, load_catalog(), lambda _k: None, shard=Shard(2, i))  # type: ignore[arg-type]
              for i in range(2)]
    node = _node("a", theirs, fault=True)
    for fleet in fleets:
        for pool in (mine, theirs):
            fleet._on_pool(pool, None, {"metadata": {"name": pool}, "spec": {}})
        fleet.node_informer.upsert(node)
        fleet._on_node("a", None, node)
    assert [f.owns("a") for f in fleets] == [False, True]
    active = _record("r1", "a", mine, "Acting")
    for fleet in fleets:
        fleet.record_informer.upsert(active)
        fleet._on_record("r1", None, active)
    assert [f.owns("a") for f in fleets] == [True, False]
    assert fleets[1].counts(theirs) == (0, 0) and fleets[0].records_of("a") == [active]
    done = _record("r1", "a", mine, "Succeeded", rv="2")
    for fleet in fleets:
        fleet.record_informer.upsert(done)
        fleet._on_record("r1", active, done)
    assert [f.owns("a") for f in fleets] == [False, True]
    assert fleets[1].counts(theirs) == (1, 1) and not fleets[0].node_index.is_printed("a")


def node_in(shard: int, shards: int, prefix: str = "node") -> str:
    """The first name ``<prefix>-<i>`` of a node in no pool that ``shard`` owns."""
    return next(name for i in itertools.count() if shard_of_node(name := f"{prefix}-{i}", shards) == shard)


def test_a_node_in_no_pool_belongs_to_the_shard_of_its_name_which_also_sees_its_closed_records() -> None:
    """Its pool label removed (or its pool deleted) after a repair of another shard's pool: the
    node's own shard takes it, with the closed record that says whether the repair cordoned it;
    the pool's shard lets it go. A repair in progress keeps it on the repair's shard."""
    from autoclusters.controller.cache import Fleet

    pool = pool_in(0, 2)
    name = node_in(1, 2)
    queued: list[list[str]] = [[], []]
    fleets = [Fleet(object(), NAMES, load_catalog(), queued[i].append, shard=Shard(2, i))  # type: ignore[arg-type]
              for i in range(2)]
    pooled = _node(name, pool)
    unpooled = {**pooled, "metadata": {**pooled["metadata"], "resourceVersion": "2", "labels": {}}}
    done = _record("r1", name, pool, "Succeeded")
    for fleet in fleets:
        fleet._on_pool(pool, None, {"metadata": {"name": pool}, "spec": {}})
        fleet.record_informer.upsert(done)
        fleet._on_record("r1", None, done)
        fleet.node_informer.upsert(pooled)
        fleet._on_node(name, None, pooled)
    assert [f.owns(name) for f in fleets] == [True, False]
    assert [f.records_of(name) for f in fleets] == [[done], []]
    for q in queued:
        q.clear()
    for fleet in fleets:
        fleet.node_informer.upsert(unpooled)
        fleet._on_node(name, pooled, unpooled)
    assert [f.owns(name) for f in fleets] == [False, True]
    assert [f.node_index.is_indexed(name) for f in fleets] == [False, True]
    assert name in queued[1]  # looked at by its new shard (shard 0 queues it too, and skips it: not its own)
    assert fleets[1].records_of(name) == [done]  # another shard's record, closed: history
    # a new repair of the node, in progress in shard 0's pool: the node is shard 0's again, and
    # shard 1 never reads that record as its own
    active = _record("r2", name, pool, "Draining")
    for fleet in fleets:
        fleet.record_informer.upsert(active)
        fleet._on_record("r2", None, active)
    assert [f.owns(name) for f in fleets] == [True, False]
    assert fleets[1].records_of(name) == []
    # one shard: every node in no pool is its own
    single = Fleet(object(), NAMES, load_catalog(), lambda _k: None)  # type: ignore[arg-type]
    single.node_informer.upsert(unpooled)
    assert single.owns(name)


# --- two shards against one (fake) API server ---------------------------------------------------
def test_two_shards_each_repair_only_their_own_pools() -> None:
    world = Harness(shard=Shard(2, 0))
    other = Harness(shard=Shard(2, 1), world=world)
    pools = [pool_in(0, 2), pool_in(1, 2)]
    for i, pool in enumerate(pools):
        world.pool(pool)
        world.node(f"n{i}", pool)
    world.start()
    other.start()
    world.api.min_watchers = 8
    world.fault("n0")
    world.fault("n1")
    keys0 = world.run(lambda: world.phase("n0") == "Succeeded")
    assert world.phase("n0") == "Succeeded" and world.records("n1") == []
    keys1 = other.run(lambda: other.phase("n1") == "Succeeded")
    assert other.phase("n1") == "Succeeded"
    assert "n1" not in keys0 and f"pool:{pools[1]}" not in keys0
    assert "n0" not in keys1 and f"pool:{pools[0]}" not in keys1
    for pool in pools:  # each pool's status written by its own shard
        status = (world.api.read(world.pool_path(pool)) or {})["status"]
        assert status["nodes"] == 1, (pool, status)
    assert len(world.records()) == 2
    world.stop()
    other.fleet.stop()
    other.queue.close()


def test_a_repair_in_progress_is_resumed_by_the_shard_its_pool_moved_to() -> None:
    """N changes from 1 to 2: the record is the state, so the pool's new shard carries on from it."""
    first = Harness()
    pool = pool_in(1, 2)
    first.pool(pool)
    first.node("n0", pool)
    first.start()
    first.fault("n0")
    first.run(lambda: first.phase("n0") == "Acting")
    first.fleet.stop()
    first.queue.close()
    first.api.min_watchers = 0
    others = [Harness(shard=Shard(2, i), world=first) for i in range(2)]
    for h in others:
        h.start()
    first.api.min_watchers = 8
    keys = others[0].run(lambda: others[0].phase("n0") == "Succeeded", seconds=30)
    assert "n0" not in keys and others[0].phase("n0") == "Acting"  # shard 0 leaves it alone
    others[1].run(lambda: others[1].phase("n0") == "Succeeded")
    (record,) = first.records("n0")
    assert record["status"]["phase"] == "Succeeded" and record["status"]["attempts"] == 1
    assert first.hosts.reboots == 1  # resumed, not done again
    for h in others:
        h.fleet.stop()
        h.queue.close()
    first.api.close()


def _leave_marked(h: Harness, node: str, *, unlabel: bool = True, cordon: bool = True) -> None:
    """What a crash right after a repair closed leaves: our label and taint (and the cordon);
    with ``unlabel`` the node's pool label removed in the same write."""
    h.api.edit(f"/api/v1/nodes/{node}", lambda n: (
        n["metadata"]["labels"].pop(NAMES.pool_label) if unlabel else None,
        n["metadata"]["labels"].update({NAMES.maintenance_required: "true"}),
        n["spec"].update({"unschedulable": cordon,
                          "taints": [{"key": NAMES.taint_key, "value": "true", "effect": "PreferNoSchedule"}]})))


def _marked(h: Harness, node: str) -> bool:
    obj = h.node_obj(node) or {}
    return NAMES.maintenance_required in obj["metadata"]["labels"] or any(
        t["key"] == NAMES.taint_key for t in obj["spec"].get("taints") or [])


def test_leftover_marks_on_a_node_in_no_pool_are_removed_by_exactly_one_shard() -> None:
    """With one shard the controller removes them; with two, the shard the node's name hashes to
    does, and uncordons it as the repair's record (another shard's) says. A node's pool label
    removed, or its pool deleted (under a cluster default policy that is off)."""
    world = Harness(shard=Shard(2, 0))
    other = Harness(shard=Shard(2, 1), world=world)
    world.api.put(f"/api/v1/namespaces/{NS}/configmaps", default_pool.configmap({"consentMode": "off"}, NS))
    pool, deleted = pool_in(0, 2), pool_in(0, 2, "deleted")
    repaired, stray, orphan = node_in(1, 2, "repaired"), node_in(1, 2, "stray"), node_in(1, 2, "orphan")
    world.pool(pool)
    world.pool(deleted)
    world.node(repaired, pool)
    world.node(stray, pool)
    world.node(orphan, deleted)
    world.start()
    other.start()
    world.api.min_watchers = 8
    world.fault(repaired)
    world.run(lambda: world.phase(repaired) == "Succeeded")
    other.run(seconds=5)
    assert world.phase(repaired) == "Succeeded" and not _marked(world, repaired)
    _leave_marked(world, repaired)
    _leave_marked(world, stray)  # never repaired: no record says the cordon is ours
    world.api.remove(world.pool_path(deleted))
    world.api.settle()
    _leave_marked(world, orphan, unlabel=False)
    world.run(seconds=30)
    assert all(_marked(world, n) for n in (repaired, stray, orphan))  # shard 0 leaves them: not its own now
    assert not any(world.fleet.owns(n) for n in (repaired, stray, orphan))
    keys1 = other.run(seconds=30)
    assert {repaired, stray, orphan} <= set(keys1)
    assert not _marked(world, repaired) and not (world.node_obj(repaired) or {})["spec"].get("unschedulable")
    for node in (stray, orphan):
        assert not _marked(world, node) and (world.node_obj(node) or {})["spec"].get("unschedulable") is True
    assert len(world.records()) == 1
    world.stop()
    other.fleet.stop()
    other.queue.close()


def test_a_key_queued_for_another_shards_node_is_not_reconciled() -> None:
    """A key already queued when its node went to another shard (or queued by a resync that
    raced the move) is skipped, not repaired twice."""
    h = Harness(shard=Shard(2, 0))
    theirs = pool_in(1, 2)
    h.pool(theirs)
    h.node("n0", theirs)
    h.start()
    h.fault("n0")
    h.api.settle()
    h.queue.add("n0")
    h.queue.add(f"pool:{theirs}")
    h.run(seconds=30)
    assert h.records() == [] and "status" not in (h.api.read(h.pool_path(theirs)) or {})
    h.stop()


def _move(h: Harness, node: str, pool: str) -> None:
    h.api.edit(f"/api/v1/nodes/{node}", lambda n: n["metadata"]["labels"].update({NAMES.pool_label: pool}))


def test_a_node_moved_to_another_shards_pool_keeps_its_attempt_budget() -> None:
    """The attempt budget counts the node's repairs in every pool, as one controller counts them:
    a node that spent it in a pool of shard 0 is not repaired again by shard 1 after it moved
    into a pool of shard 1 (HumanNeeded). Before, shard 1 saw only its own pools' records."""
    world = Harness(shard=Shard(2, 0))
    other = Harness(shard=Shard(2, 1), world=world)
    before, after = pool_in(0, 2), pool_in(1, 2)
    for pool in (before, after):
        world.pool(pool, attemptBudget={"maxRepairs": 1})
    world.node("n1", before)
    world.start()
    other.start()
    world.api.min_watchers = 8
    world.fault("n1")
    world.run(lambda: world.phase("n1") == "Succeeded" and not world.boot_at_fault)
    assert world.phase("n1") == "Succeeded" and world.hosts.reboots == 1
    _move(world, "n1", after)
    world.run(seconds=5)
    other.run(seconds=5)
    world.fault("n1")
    other.run(lambda: len(world.records("n1")) == 2, seconds=30)
    latest = max(world.records("n1"), key=lambda r: r["metadata"]["creationTimestamp"])
    assert latest["spec"]["pool"] == after and latest["status"]["phase"] == "HumanNeeded"
    assert latest["status"]["outcome"] == "AttemptBudgetExhausted" and world.hosts.reboots == 1
    world.stop()
    other.fleet.stop()
    other.queue.close()


def test_a_node_moved_to_another_shards_pool_gets_a_record_name_of_its_own() -> None:
    """The node's repair in a pool of shard 0 was cancelled (the pool turned off) while its fault
    stayed; moved into a pool of shard 1, the same fault episode is a new repair there. Its
    record's name counts the node's earlier records of every pool, so it is not the cancelled
    record's name. Before, shard 1 counted none, chose that name, and its create answered 409
    on every look (a conflict loop, no repair)."""
    world = Harness(shard=Shard(2, 0))
    other = Harness(shard=Shard(2, 1), world=world)
    before, after = pool_in(0, 2), pool_in(1, 2)
    world.pool(before, mode="propose")
    world.pool(after)
    world.node("n1", before)
    world.start()
    other.start()
    world.api.min_watchers = 8
    world.fault("n1")
    world.run(lambda: world.phase("n1") == "AwaitingApproval")
    world.pool(before, mode="off")
    world.run(lambda: world.phase("n1") == "Closed")
    assert world.phase("n1") == "Closed"
    creates: list[str] = []
    world.api.before.append(lambda req: creates.append(req.body["metadata"]["name"])
                            if req.verb == "POST" and req.resource == "remediations" else None)
    _move(world, "n1", after)
    world.run(seconds=5)
    other.run(lambda: world.phase("n1") == "Succeeded", seconds=120)
    names = {r["metadata"]["name"] for r in world.records("n1")}
    assert len(names) == 2 and world.phase("n1") == "Succeeded" and len(creates) == 1
    world.stop()
    other.fleet.stop()
    other.queue.close()
