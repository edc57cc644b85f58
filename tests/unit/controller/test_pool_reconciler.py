"""The pool reconciler (``controller.pool_reconciler``): the pool's RepairProviderReady condition,
kept up to date between passes: each pass asks the providers only about the members changed
since the last one (joined, left, or changed in what a reconcile reacts to), and says what a
pass over every member would say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters import api
from autoclusters.api import RepairAction
from autoclusters.controller.pool_policy import Pool, parse_pool
from autoclusters.controller.statemachine import HOLD_PROVIDER_REFUSED
from autoclusters.providers.base import Provider
from tests.unit.controller.harness import NAMES, Harness

REFUSE = "example.com/refuse"  # a label the fake provider refuses nodes by


class Refusing:
    """A provider that refuses the nodes labelled REFUSE, and counts the nodes it is asked about."""

    def __init__(self, name: str = "fake", label: str = REFUSE) -> None:
        self.name = name
        self.label = label
        self.asked: list[str] = []

    def refusal(self, node: dict[str, Any] | None) -> str:
        meta = (node or {}).get("metadata") or {}
        self.asked.append(meta.get("name", ""))
        return f"{meta.get('name')} is labelled {self.label}" if self.label in (meta.get("labels") or {}) else ""

    def take(self) -> list[str]:
        asked, self.asked = sorted(self.asked), []
        return asked


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    harness.pool("p")
    for i in range(10):
        harness.node(f"n{i}")
    harness.start()
    yield harness
    harness.stop()


def _serve(h: Harness, pool: Pool | dict[str, Any], provider: Refusing) -> None:
    """``provider`` is the one the controller uses for every action of the pool's spec."""
    parsed = pool if isinstance(pool, Pool) else parse_pool(pool)
    for action in RepairAction:
        spec = parsed.provider_for(action)
        assert spec is not None
        h.reconciler._providers[(parsed.name, spec.key())] = provider  # type: ignore[assignment]


def _condition(h: Harness, name: str = "p") -> tuple[str, bool, str, str]:
    pool = h.fleet.pool_named(name)
    assert pool is not None
    return h.reconciler.pool_reconciler._provider_condition(pool)


def _from_scratch(h: Harness, name: str = "p") -> tuple[str, bool, str, str]:
    """What a pass over every member says (the kept answers forgotten), for comparison."""
    kept = h.reconciler.pool_reconciler._refusals.pop(name, None)
    try:
        return _condition(h, name)
    finally:
        if kept is not None:
            h.reconciler.pool_reconciler._refusals[name] = kept


def _label(h: Harness, node: str, key: str, value: str | None) -> None:
    def change(n: dict[str, Any]) -> None:
        if value is None:
            n["metadata"]["labels"].pop(key, None)
        else:
            n["metadata"]["labels"][key] = value

    h.api.edit(f"/api/v1/nodes/{node}", change)
    h.api.settle()


def _heartbeat(h: Harness, node: str, beat: str) -> None:
    def change(n: dict[str, Any]) -> None:
        for c in n["status"]["conditions"]:
            c["lastHeartbeatTime"] = beat

    h.api.edit(f"/api/v1/nodes/{node}", change)
    h.api.settle()


def test_a_node_refused_or_accepted_between_passes_flips_the_condition(h: Harness) -> None:
    fake = Refusing()
    _serve(h, h.fleet.pool_named("p"), fake)  # type: ignore[arg-type]
    ok = _condition(h)
    assert ok[1] is True and ok[2] == "ProvidersReady"
    assert len(fake.take()) == 10  # the first pass asks about every member

    _label(h, "n3", REFUSE, "yes")
    _label(h, "n7", REFUSE, "yes")
    refused = _condition(h)
    assert refused == ("RepairProviderReady", False, HOLD_PROVIDER_REFUSED,
                       f"the fake provider refuses 2 node(s) of the pool (n3, n7): n3 is labelled {REFUSE}")
    assert fake.take() == ["n3", "n7"]
    assert refused == _from_scratch(h)
    fake.take()

    _label(h, "n3", REFUSE, None)
    assert _condition(h)[3] == f"the fake provider refuses 1 node(s) of the pool (n7): n7 is labelled {REFUSE}"
    _label(h, "n7", REFUSE, None)
    assert _condition(h) == ok
    assert fake.take() == ["n3", "n7"]


def test_a_node_that_leaves_the_pool_or_is_deleted_drops_out(h: Harness) -> None:
    fake = Refusing()
    _serve(h, h.fleet.pool_named("p"), fake)  # type: ignore[arg-type]
    for node in ("n1", "n2"):
        _label(h, node, REFUSE, "yes")
    assert "refuses 2 node(s) of the pool (n1, n2)" in _condition(h)[3]
    fake.take()

    h.api.remove("/api/v1/nodes/n1")
    h.api.settle()
    assert "refuses 1 node(s) of the pool (n2)" in _condition(h)[3]
    _label(h, "n2", NAMES.pool_label, "elsewhere")  # now in another pool (the default policy's)
    assert _condition(h)[1] is True
    assert fake.take() == []  # neither is a member any more: nothing to ask
    assert _condition(h) == _from_scratch(h)


def test_a_change_of_the_pools_provider_asks_about_every_member_again(h: Harness) -> None:
    first = Refusing()
    _serve(h, h.fleet.pool_named("p"), first)  # type: ignore[arg-type]
    _label(h, "n4", "example.com/old", "yes")
    _label(h, "n5", REFUSE, "yes")
    assert "(n5)" in _condition(h)[3]
    first.take()

    # The same spec, the provider built again (as after the pool's provider settings changed
    # back and forth): nothing the old one said is kept.
    again = Refusing(label="example.com/old")
    _serve(h, h.fleet.pool_named("p"), again)  # type: ignore[arg-type]
    assert _condition(h)[3] == "the fake provider refuses 1 node(s) of the pool (n4): n4 is labelled example.com/old"
    assert len(again.take()) == 10 and first.take() == []

    # The spec itself changed: the new provider answers for every member.
    obj = h.api.read(h.pool_path("p"))
    assert obj is not None
    obj["spec"]["provider"] = {"type": "command", "command": {"command": ["true"]}}
    h.allow(obj["spec"])
    other = Refusing(name="command", label="example.com/none")
    _serve(h, obj, other)
    h.api.put(h.pool_path(), obj)
    h.api.settle()
    assert _condition(h) == ("RepairProviderReady", True, "ProvidersReady",
                             f"providers: {parse_pool(obj).config.provider.describe()}")
    assert len(other.take()) == 10 and again.take() == []


def test_two_providers_name_a_node_both_refuse_once_with_the_first_actions_reason(h: Harness) -> None:
    pool = h.fleet.pool_named("p")
    assert pool is not None
    reset, replace = Refusing(label=REFUSE), Refusing(label="example.com/other")  # one kind, two objects
    original = h.reconciler._provider

    def by_action(p: Pool | None, action: str) -> tuple[Provider | None, Any]:
        if p is not None and p.name == "p":
            return (reset if action == RepairAction.RESET else replace), None  # type: ignore[return-value]
        return original(p, action)

    h.reconciler.pool_reconciler._provider = by_action  # the pool reconciler's view of the providers
    _label(h, "n2", "example.com/other", "yes")
    _label(h, "n2", REFUSE, "yes")
    _label(h, "n6", "example.com/other", "yes")
    assert _condition(h)[3] == f"the fake provider refuses 2 node(s) of the pool (n2, n6): n2 is labelled {REFUSE}"
    assert reset.take() == replace.take()  # each asked about every member once
    _label(h, "n6", "example.com/other", None)
    _condition(h)
    assert reset.take() == replace.take() == ["n6"]
    assert _condition(h) == _from_scratch(h)


def test_the_work_of_a_pass_is_the_changed_nodes_not_the_pool(h: Harness) -> None:
    for i in range(10, 200):
        h.node(f"n{i}")
    h.api.settle()
    fake = Refusing()
    _serve(h, h.fleet.pool_named("p"), fake)  # type: ignore[arg-type]
    _condition(h)
    assert len(fake.take()) == 200
    assert _condition(h)[1] is True and fake.take() == []  # nothing changed: nobody asked

    for i in range(100, 130):
        _heartbeat(h, f"n{i}", f"2026-01-01T00:00:{i % 60:02d}Z")  # not a change a reconcile reacts to
    for node in ("n11", "n150", "n199"):
        _label(h, node, "example.com/rack", "r2")
    _label(h, "n42", REFUSE, "yes")
    h.node("n200")  # joins the pool
    h.api.settle()
    message = _condition(h)[3]
    assert fake.take() == ["n11", "n150", "n199", "n200", "n42"]
    assert message == f"the fake provider refuses 1 node(s) of the pool (n42): n42 is labelled {REFUSE}"
    assert _condition(h) == _from_scratch(h)


def test_a_deleted_pool_forgets_its_answers() -> None:
    harness = Harness()
    try:
        harness.pool("gone")
        harness.node("a1", pool="gone")
        harness.start()
        fake = Refusing()
        _serve(harness, harness.fleet.pool_named("gone"), fake)  # type: ignore[arg-type]
        _condition(harness, "gone")
        assert "gone" in harness.reconciler.pool_reconciler._refusals
        harness.api.remove(harness.pool_path("gone"))
        harness.api.settle()
        assert harness.reconciler.pool_reconciler.reconcile("gone") is None
        assert "gone" not in harness.reconciler.pool_reconciler._refusals
        assert harness.reconciler.pool_reconciler._member_changes.take("gone") == set()
    finally:
        harness.stop()


def test_the_pool_status_written_carries_the_condition() -> None:
    """Through the pool's own reconcile (its key), not only the condition's function."""
    harness = Harness()
    try:
        harness.pool("p")
        harness.node("m1")
        harness.node("m2", **{REFUSE: "yes"})
        harness.start()
        _serve(harness, harness.fleet.pool_named("p"), Refusing())  # type: ignore[arg-type]
        harness.run(seconds=5)
        obj = harness.api.read(harness.pool_path("p"))
        assert obj is not None
        conds = {c["type"]: c for c in obj["status"]["conditions"]}
        assert conds["RepairProviderReady"]["reason"] == HOLD_PROVIDER_REFUSED
        assert "(m2)" in conds["RepairProviderReady"]["message"] and conds["Valid"]["status"] == "True"
        assert obj["apiVersion"] == f"{NAMES.api_group}/{api.VERSION}"
    finally:
        harness.stop()


def test_an_answer_that_changes_with_no_node_changing_is_read_again_at_the_resync(h: Harness) -> None:
    """A provider's answer can depend on the cluster, not only on the node (the clusterapi
    provider refuses every node while the cluster serves no Machines): the kept answers stand
    until the resync, whose pool pass asks about every member again."""
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.manager import Controller

    class Installed(Refusing):
        def __init__(self) -> None:
            super().__init__(name="clusterapi")
            self.served = False

        def refusal(self, node: dict[str, Any] | None) -> str:
            self.asked.append(((node or {}).get("metadata") or {}).get("name", ""))
            return "" if self.served else "the cluster serves no Cluster API Machines"

    fake = Installed()
    _serve(h, h.fleet.pool_named("p"), fake)  # type: ignore[arg-type]
    assert "refuses 10 node(s)" in _condition(h)[3]
    fake.served = True  # Cluster API installed: no node changed
    assert "refuses 10 node(s)" in _condition(h)[3]  # kept
    h.reconciler.pool_reconciler.recheck_providers()
    assert _condition(h)[1] is True

    # The manager's resync asks for it.
    ctl = Controller(h.kube, ControllerConfig(metrics_port=0), names=NAMES)
    ctl.reconciler.pool_reconciler._refusals["p"] = h.reconciler.pool_reconciler._refusals["p"]
    ctl.resync()
    assert ctl.reconciler.pool_reconciler._refusals == {}
