"""The Karpenter provider's bookkeeping against a stand-in API (the real Karpenter runs in
tests/integration/test_karpenter.py): which NodeClaim it deletes, how a new node is matched
one for one, what it says when nothing comes, and the do-not-disrupt guard of marking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.clock import FakeClock
from autoclusters.controller.actuator import Actuator
from autoclusters.names import Names
from autoclusters.providers.base import ProviderError
from autoclusters.providers.karpenter import DO_NOT_DISRUPT, DO_NOT_REPAIR, KarpenterProvider
from autoclusters.providers.types import Operation, ProviderState
from tests.unit.providers.karpenter_world import KarpenterWorld

NAMES = Names()
POOL = "a100"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POOL_LABELS = {NAMES.pool_label: POOL}


def world(*old: str) -> tuple[KarpenterWorld, FakeClock, KarpenterProvider]:
    clock = FakeClock(T0)
    w = KarpenterWorld(clock)
    for name in old:
        w.add_karpenter_node(name, "gpu", T0 - timedelta(hours=1), POOL_LABELS)
    return w, clock, KarpenterProvider(w.kube, clock, NAMES, timeout_seconds=300)


def op(i: int = 1, action: RepairAction = RepairAction.REPLACE) -> Operation:
    return Operation(f"rec-{i}", action, T0)


def launched(clock: FakeClock) -> datetime:
    """When Karpenter's node for the evicted pods appears: a second later at the soonest (it
    batches pending pods for a second); a node of the operation's own second never counts."""
    return clock.now() + timedelta(seconds=1)


def test_replace_deletes_the_nodes_claim_then_matches_the_new_node() -> None:
    w, clock, prov = world("old-1", "other")
    o = op()
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.NOT_STARTED
    prov.drive(o, "old-1", POOL)
    assert w.deleted_claims == ["gpu-old-1"]  # only the node's own claim
    assert (w.claim("gpu-old-1") or {})["metadata"]["annotations"]["remediation.autoclusters.io/operation"] == "rec-1"
    prov.drive(o, "old-1", POOL)  # again: nothing new
    assert w.deleted_claims == ["gpu-old-1"]
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.RUNNING
    w.karpenter_finishes("gpu-old-1")
    clock.advance(20)
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.RUNNING  # nothing new yet
    w.add_karpenter_node("new-1", "gpu", clock.now(), POOL_LABELS)
    prov.drive(o, "old-1", POOL)
    view = prov.progress(o, "old-1", POOL, w.node)
    assert (view.state, view.new_node) == (ProviderState.SUCCEEDED, "new-1")
    assert w.nodes["new-1"]["metadata"]["annotations"]["remediation.autoclusters.io/replaces"] == "old-1"
    assert not w.nodes["other"]["metadata"]["annotations"]  # the pool's older node is never claimed


def test_a_node_launched_during_the_drain_counts() -> None:
    """The evicted pods' demand can bring the new node before the operation starts."""
    w, clock, prov = world("old-1", "older")
    _actuator(w).ensure_marked(w.kube.get_node("old-1"), cordon=True)  # marked at T0
    clock.advance(5)
    w.add_karpenter_node("early", "gpu", clock.now(), POOL_LABELS)  # launched while draining
    clock.advance(10)
    o = Operation("rec-1", RepairAction.REPLACE, clock.now())
    prov.drive(o, "old-1", POOL)
    w.karpenter_finishes("gpu-old-1")
    prov.drive(o, "old-1", POOL)
    assert prov.progress(o, "old-1", POOL, w.node).new_node == "early"


def test_done_only_once_the_old_node_is_gone() -> None:
    """Karpenter terminates the old node after the new one may already be Ready: until it is
    gone the pool is one over its size, and its fault would open a second repair."""
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)  # launched while old-1 terminates
    prov.drive(o, "old-1", POOL)
    view = prov.progress(o, "old-1", POOL, w.node)
    assert (view.state, view.new_node) == (ProviderState.RUNNING, "new-1")
    w.karpenter_finishes("gpu-old-1")
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.SUCCEEDED


def test_an_old_node_that_never_goes_fails_at_the_timeout() -> None:
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)
    prov.drive(o, "old-1", POOL)
    clock.advance(300)
    view = prov.progress(o, "old-1", POOL, w.node)
    assert view.state == ProviderState.FAILED and "old-1 still exists" in view.message and "gpu-old-1" in view.message


def test_two_replacements_never_count_the_same_new_node() -> None:
    w, clock, prov = world("old-1", "old-2")
    o1, o2 = op(1), op(2)
    prov.drive(o1, "old-1", POOL)
    prov.drive(o2, "old-2", POOL)
    w.karpenter_finishes("gpu-old-1")
    w.karpenter_finishes("gpu-old-2")
    clock.advance(30)
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)
    prov.drive(o1, "old-1", POOL)
    prov.drive(o2, "old-2", POOL)
    assert prov.progress(o1, "old-1", POOL, w.node).new_node == "new-1"
    assert prov.progress(o2, "old-2", POOL, w.node).state == ProviderState.RUNNING
    w.add_karpenter_node("new-2", "gpu", launched(clock), POOL_LABELS)
    prov.drive(o2, "old-2", POOL)
    assert prov.progress(o2, "old-2", POOL, w.node).new_node == "new-2"


def test_with_the_controllers_cache_no_node_is_read_from_the_api() -> None:
    """In the controller the provider reads nodes (the old one, the NodePool's) from its cache
    and puts its claim of the new node there; the same replacement, the same answers."""
    from autoclusters.providers.base import NodeCache

    w, clock, _ = world("old-1", "other")
    cached = w.nodes

    def deleted(name: str) -> None:
        cached.pop(name, None)

    cache = NodeCache(cached.get, lambda n: cached.__setitem__(n["metadata"]["name"], n), deleted,
                      lambda: list(cached.values()))
    prov = KarpenterProvider(w.kube, clock, NAMES, timeout_seconds=300, nodes=cache)
    o = op()
    prov.drive(o, "old-1", POOL)
    assert w.deleted_claims == ["gpu-old-1"]
    assert prov.progress(o, "old-1", POOL, cached.get).state == ProviderState.RUNNING
    w.karpenter_finishes("gpu-old-1")
    cached.pop("old-1")  # the cache's watch sees the node go
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)
    w.add_karpenter_node("elsewhere", "other-pool", launched(clock), POOL_LABELS)  # another NodePool's
    cached.update((n, w.nodes[n]) for n in ("new-1", "elsewhere"))  # and the new ones come
    prov.drive(o, "old-1", POOL)
    view = prov.progress(o, "old-1", POOL, cached.get)
    assert (view.state, view.new_node) == (ProviderState.SUCCEEDED, "new-1")
    assert not cached["elsewhere"]["metadata"]["annotations"]
    assert not [r for r in w.api.requests if r.path.startswith("/api/v1/nodes") and r.verb in ("GET", "LIST")]


def test_the_claim_an_owner_reference_names_must_name_the_node() -> None:
    """Karpenter names a node's NodeClaim in its ownerReferences: that claim is read, and used
    only when its status names the node; otherwise the NodeClaims are listed."""
    w, _, prov = world("old-1", "other")
    ref = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "gpu-other", "uid": "u"}
    w.edit_node("old-1", lambda n: n["metadata"].update(ownerReferences=[ref]))
    prov.drive(op(), "old-1", POOL)
    assert w.deleted_claims == ["gpu-old-1"]
    w2, _, prov2 = world("old-1")
    w2.edit_node("old-1", lambda n: n["metadata"].update(ownerReferences=[{**ref, "name": "gpu-old-1"}]))
    prov2.drive(op(), "old-1", POOL)
    assert w2.deleted_claims == ["gpu-old-1"]
    assert w2.api.counts()[("LIST", "nodeclaims")] == 0  # the claim the reference names was read, not listed


def test_new_node_that_is_not_ready_or_under_maintenance_is_not_matched() -> None:
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.karpenter_finishes("gpu-old-1")
    w.add_karpenter_node("booting", "gpu", launched(clock), POOL_LABELS, ready=False)
    w.add_karpenter_node("sick", "gpu", launched(clock), {**POOL_LABELS, NAMES.maintenance_required: "true"})
    prov.drive(o, "old-1", POOL)
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.RUNNING
    w.edit_node("booting", lambda n: n["status"]["conditions"][0].update(status="True"))
    prov.drive(o, "old-1", POOL)
    assert prov.progress(o, "old-1", POOL, w.node).new_node == "booting"


def test_a_restarted_controller_finds_the_matched_node_by_the_pool_label() -> None:
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.karpenter_finishes("gpu-old-1")
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)
    fresh = KarpenterProvider(w.kube, clock, NAMES)  # knows nothing of old-1's claim
    fresh.drive(o, "old-1", POOL)
    assert fresh.progress(o, "old-1", POOL, w.node).new_node == "new-1"


def test_nothing_pending_fails_at_the_timeout_saying_why() -> None:
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.karpenter_finishes("gpu-old-1")
    clock.advance(299)
    assert prov.progress(o, "old-1", POOL, w.node).state == ProviderState.RUNNING
    clock.advance(1)
    view = prov.progress(o, "old-1", POOL, w.node)
    assert view.state == ProviderState.FAILED
    assert "within 300s" in view.message and "Pending pods" in view.message
    assert "karpenter.sh/nodepool=gpu" in view.message


def test_a_new_node_without_the_pool_label_is_named_in_the_failure() -> None:
    w, clock, prov = world("old-1")
    o = op()
    prov.drive(o, "old-1", POOL)
    w.karpenter_finishes("gpu-old-1")
    w.add_karpenter_node("unlabelled", "gpu", launched(clock), {})
    prov.drive(o, "old-1", POOL)
    clock.advance(300)
    view = prov.progress(o, "old-1", POOL, w.node)
    assert view.state == ProviderState.FAILED
    assert "unlabelled" in view.message and f"{NAMES.pool_label}={POOL}" in view.message


def test_a_node_without_a_nodeclaim_fails_clearly() -> None:
    w, _, prov = world()
    w.add_node({"metadata": {"name": "plain"}, "spec": {}, "status": {}})
    prov.drive(op(), "plain", POOL)  # no exception loop in the controller
    view = prov.progress(op(), "plain", POOL, w.node)
    assert view.state == ProviderState.FAILED and "no Karpenter NodeClaim" in view.message


def test_a_node_karpenter_did_not_launch_is_refused_before_the_drain() -> None:
    w, _, prov = world("k1")
    assert prov.refusal(w.kube.get_node("k1")) == "" and prov.refusal(None) == ""
    why = prov.refusal({"metadata": {"name": "plain", "labels": {}}})
    assert "plain" in why and "karpenter.sh/nodepool" in why


def test_reset_is_refused_with_the_reason() -> None:
    w, _, prov = world("old-1")
    prov.drive(op(action=RepairAction.RESET), "old-1", POOL)
    assert w.deleted_claims == []
    view = prov.progress(op(action=RepairAction.RESET), "old-1", POOL, w.node)
    assert view.state == ProviderState.FAILED and "only replaces" in view.message


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ProviderError):
        KarpenterProvider(KarpenterWorld(), FakeClock(T0), NAMES, timeout_seconds=0)  # type: ignore[arg-type]


# --- marking keeps Karpenter's disruption away ------------------------------------------
class _Null:
    def emit(self, *a: Any, **k: Any) -> None: ...

    def notify(self, *a: Any, **k: Any) -> None: ...


def _actuator(w: KarpenterWorld) -> Actuator:
    return Actuator(w.kube, NAMES, _Null(), _Null(), FakeClock(T0))  # type: ignore[arg-type]


def test_marking_a_karpenter_node_adds_do_not_disrupt_and_unmarking_removes_it() -> None:
    w, _, _ = world("k1")
    act = _actuator(w)
    marked = act.ensure_marked(w.kube.get_node("k1"), cordon=True)
    ann = marked["metadata"]["annotations"]
    assert ann[DO_NOT_DISRUPT] == "true" and ann[DO_NOT_REPAIR] == "true"
    assert ann[NAMES.karpenter_guard_marker] == f"{DO_NOT_DISRUPT},{DO_NOT_REPAIR}"
    assert ann[NAMES.marked_at_annotation] == "2026-03-01T12:00:00Z"
    assert act.ensure_marked(marked) == marked  # idempotent: no second write
    clean = act.unmark(marked, uncordon=True)
    assert clean["metadata"]["annotations"] == {}


def test_a_users_own_do_not_disrupt_stays_after_the_repair() -> None:
    w, _, _ = world("k1")
    w.edit_node("k1", lambda n: n["metadata"].update(annotations={DO_NOT_DISRUPT: "true"}))
    act = _actuator(w)
    marked = act.ensure_marked(w.kube.get_node("k1"))
    ann = marked["metadata"]["annotations"]
    assert ann[NAMES.karpenter_guard_marker] == DO_NOT_REPAIR and ann[DO_NOT_REPAIR] == "true"
    assert NAMES.marked_at_annotation in ann
    assert act.unmark(marked, uncordon=True)["metadata"]["annotations"] == {DO_NOT_DISRUPT: "true"}


def test_nodes_karpenter_does_not_own_get_no_annotation() -> None:
    w = KarpenterWorld()
    w.add_node({"metadata": {"name": "plain", "labels": {}}, "spec": {}})
    marked = _actuator(w).ensure_marked(w.kube.get_node("plain"))
    assert "annotations" not in marked["metadata"]


def test_a_pool_names_karpenter_for_replacement_only() -> None:
    from autoclusters.deploy.providers import ProviderSettingsError, parse_provider_choice
    from autoclusters.providers.registry import BuildContext, build_provider

    choice = parse_provider_choice({"reset": {"type": "hostReboot"}, "replace": {"type": "karpenter"}})
    spec = choice.for_action("replace")
    assert spec is not None and dict(spec.settings) == {"timeoutSeconds": 900}
    prov = build_provider(spec, BuildContext(KarpenterWorld().kube, FakeClock(T0), NAMES))
    assert isinstance(prov, KarpenterProvider) and prov.timeout_seconds == 900
    assert parse_provider_choice({"type": "karpenter"}).missing() == ("reset",)
    with pytest.raises(ProviderSettingsError, match="karpenter cannot reset"):
        parse_provider_choice({"reset": {"type": "karpenter"}})


def test_refuses_a_node_karpenter_did_not_launch() -> None:
    w, _, prov = world("old-1")
    assert prov.refusal(w.nodes["old-1"]) == ""
    assert prov.refusal(None) == ""  # a node already gone: the record's repair goes on
    stranger = {"metadata": {"name": "static-1", "labels": POOL_LABELS}}
    assert "no karpenter.sh/nodepool label" in prov.refusal(stranger)


def test_it_has_every_method_of_the_provider_interface() -> None:
    from autoclusters.providers.base import Provider

    wanted = {n for n in vars(Provider) if not n.startswith("_")} - {"name"}
    assert wanted and all(callable(getattr(KarpenterProvider, n, None)) for n in wanted)


def test_an_ended_replacement_leaves_nothing_remembered() -> None:
    """The controller runs for months: what the provider remembers of a replacement (the node's
    NodeClaim, the claim's deletion, the repair's bound) goes when it ends, and a look after
    the end still answers the same."""
    w, clock, prov = world("old-1", "old-2")
    done, failed = op(1), op(2)
    for o, node in ((done, "old-1"), (failed, "old-2")):
        prov.drive(o, node, POOL)
    w.karpenter_finishes("gpu-old-1")
    w.add_karpenter_node("new-1", "gpu", launched(clock), POOL_LABELS)
    prov.drive(done, "old-1", POOL)
    assert prov._targets and prov._going and prov._claims._baseline  # remembered while they run
    assert prov.progress(done, "old-1", POOL, w.node).state == ProviderState.SUCCEEDED
    clock.advance(300)
    assert prov.progress(failed, "old-2", POOL, w.node).state == ProviderState.FAILED
    assert (prov._targets, prov._going, prov._claims._baseline) == ({}, set(), {})
    view = prov.progress(done, "old-1", POOL, w.node)
    assert (view.state, view.new_node) == (ProviderState.SUCCEEDED, "new-1")
