"""Write fencing (kube/fence.py): the guard on an injected clock, the client's one check before
every write, the elector opening and closing it, and the controller fencing every client it
holds but the election's."""

from __future__ import annotations

from typing import Any

import pytest

from autoclusters.clock import FakeClock
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.controller.manager import Controller
from autoclusters.controller.statemachine import DriveProvider
from autoclusters.kube import Kube
from autoclusters.kube.fence import Fenced, LeaseFence
from autoclusters.kube.leader import LeaderElector
from autoclusters.providers.types import Operation
from tests.unit.controller.harness import NAMES
from tests.unit.fakeapi import FakeApi

NS = "autoclusters-system"


def test_the_fence_is_closed_until_granted_and_closes_at_its_deadline_by_the_monotonic_clock() -> None:
    clock = FakeClock()
    fence = LeaseFence(clock)
    with pytest.raises(Fenced, match="no lease held"):
        fence.check("PATCH /api/v1/nodes/n1")
    fence.grant(clock.monotonic() + 3)
    fence.check("a write")  # open
    clock.advance(2.999)
    assert fence.is_open()
    clock.advance(0.001)  # the deadline itself is outside
    assert not fence.is_open()
    with pytest.raises(Fenced, match="past its deadline"):
        fence.check("a write")
    fence.grant(clock.monotonic() + 3)
    assert fence.is_open()
    fence.revoke()
    assert not fence.is_open()
    assert fence.refused == 2


def test_a_stale_grant_never_shortens_a_fresher_one() -> None:
    clock = FakeClock()
    fence = LeaseFence(clock)
    fence.grant(clock.monotonic() + 3)
    fence.grant(clock.monotonic() + 1)  # a slower answer to an older renewal
    clock.advance(2)
    assert fence.is_open()


def test_a_fenced_client_sends_no_write_when_closed_and_reads_all_the_same() -> None:
    api, clock = FakeApi(), FakeClock()
    api.put("/api/v1/nodes", {"metadata": {"name": "n1"}, "spec": {}})
    fence = LeaseFence(clock)
    kube = api.kube().fenced(fence)
    view = kube.for_component("provider/simulated")  # a view made from it carries the fence
    mark = len(api.requests)
    for client in (kube, view):
        with pytest.raises(Fenced):
            client.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
        with pytest.raises(Fenced):
            client.evict("default", "p1")
        with pytest.raises(Fenced):
            client.delete("/api/v1/nodes/n1")
        with pytest.raises(Fenced):
            client.check_fence("provider reset on node n1")
        assert client.get_node("n1")["metadata"]["name"] == "n1"
    assert [r.verb for r in api.requests[mark:]] == ["GET", "GET"]  # no write reached the server
    fence.grant(clock.monotonic() + 1)
    view.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert kube.unfenced().fence is None
    fence.revoke()
    kube.unfenced().patch_node("n1", {"metadata": {"labels": {"a": "c"}}})  # the election's client


def _pair(api: FakeApi, clock: FakeClock, **kw: Any) -> tuple[LeaderElector, LeaderElector]:
    return tuple(LeaderElector(api.kube(), clock, namespace=NS, name="ctl", identity=i,  # type: ignore[return-value]
                               lease_seconds=4, renew_deadline=3, fence=LeaseFence(clock), **kw) for i in "ab")


def test_the_fence_closes_before_another_replica_may_take_the_lease() -> None:
    """The paused leader: it renewed, then nothing ran (SIGSTOP) while the clock went on. At
    every instant where the other replica can take the lease, the leader's fence is closed
    already, by at least lease_seconds - renew_deadline."""
    api, clock = FakeApi(), FakeClock()
    a, b = _pair(api, clock)
    assert a.fence is not None and b.fence is not None
    assert a.try_acquire_or_renew()
    assert a.fence.is_open() and not b.fence.is_open()
    assert not b.try_acquire_or_renew()  # b sees a's renewal now
    closed_at = taken_at = None
    for step in range(1, 100):
        clock.advance(0.1)
        if closed_at is None and not a.fence.is_open():
            closed_at = step
        if b.try_acquire_or_renew():
            taken_at = step
            break
        assert a.fence.is_open() or closed_at is not None
    assert closed_at is not None and taken_at is not None
    assert closed_at == 30 and taken_at == 40  # renew_deadline (3 s) and lease_seconds (4 s) after
    assert b.fence.is_open() and not a.fence.is_open()
    # a resumes: its renewal on its own last write finds the Lease changed (a Conflict), it
    # reads b's fresh renewal and stays fenced.
    assert not a.try_acquire_or_renew()
    assert not a.fence.is_open()
    with pytest.raises(Fenced):
        api.kube().fenced(a.fence).patch("/api/v1/nodes/n1", {"metadata": {}})


def test_a_renewal_that_fails_lets_the_fence_close_and_losing_the_lease_closes_it_at_once() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = _pair(api, clock)
    assert a.fence is not None and b.fence is not None
    assert a.try_acquire_or_renew()
    clock.advance(2)
    assert a.try_acquire_or_renew()  # renewed: open for 3 s from now
    clock.advance(2.5)
    assert a.fence.is_open()
    a.release()  # a clean stop gives the lease away: closed before it is given
    assert not a.fence.is_open()
    assert b.try_acquire_or_renew() and b.fence.is_open()


class _Recording:
    name = "recording"

    def __init__(self) -> None:
        self.driven: list[str] = []

    def drive(self, op: Operation, node: str, pool: str) -> None:
        self.driven.append(op.id)


def test_the_actuator_asks_the_fence_before_a_provider_action() -> None:
    from tests.unit.controller.test_actuator_predrain import _state

    api, clock = FakeApi(), FakeClock()
    fence = LeaseFence(clock)
    act = Actuator(api.kube().fenced(fence), NAMES, None, None, clock)  # type: ignore[arg-type]  # no event here
    provider = _Recording()
    op = Operation(id="op-1", action=_state().action or "reset", started=clock.now())
    with pytest.raises(Fenced):
        act.run((DriveProvider(op),), "n1", None, _state(), provider)  # type: ignore[arg-type]
    assert provider.driven == []
    fence.grant(clock.monotonic() + 1)
    act.run((DriveProvider(op),), "n1", None, _state(), provider)  # type: ignore[arg-type]
    assert provider.driven == ["op-1"]


def _clients(obj: object, seen: set[int], path: str = "ctl", depth: int = 0) -> list[tuple[str, Kube]]:
    """Every Kube the controller's objects hold (a few levels deep, through attributes,
    dicts and lists)."""
    if isinstance(obj, Kube):
        return [(path, obj)]
    if id(obj) in seen or depth > 4:
        return []
    seen.add(id(obj))
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("autoclusters"):
        children = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    else:
        return []
    out: list[tuple[str, Kube]] = []
    for p, v in children:
        out += _clients(v, seen, p, depth + 1)
    return out


def test_every_client_the_controller_holds_is_fenced_but_the_elections() -> None:
    api = FakeApi()
    ctl = Controller(api.kube(), ControllerConfig(metrics_port=0), names=NAMES)
    clients = _clients(ctl, set())
    paths = {p for p, _ in clients}
    assert {"ctl.kube", "ctl.recorder._kube", "ctl.actuator._kube", "ctl.reconciler._kube"} <= paths, paths
    unfenced = sorted(p for p, k in clients if k.fence is not ctl.fence)
    assert unfenced == ["ctl.elector._kube", "ctl.layouts._kube"], unfenced
