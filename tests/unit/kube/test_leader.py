"""Leader election on a Lease in the fake API server, with a fake clock."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from autoclusters.clock import FakeClock, SystemClock
from autoclusters.kube.leader import LeaderElector
from tests.unit.fakeapi import ApiError, FakeApi, Request

NS = "autoclusters-system"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/ctl"


def _elector(api: FakeApi, clock: FakeClock | SystemClock, identity: str, **kw: Any) -> LeaderElector:
    return LeaderElector(api.kube(), clock, namespace=NS, name="ctl", identity=identity, **kw)


def _holder(api: FakeApi) -> str:
    lease = api.read(LEASE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity", ""))


def test_the_first_takes_the_lease_the_second_waits_until_it_expires() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew()  # created
    assert not b.try_acquire_or_renew()
    assert _holder(api) == "a"
    clock.advance(10)
    assert a.try_acquire_or_renew()  # renewed
    clock.advance(10)
    assert not b.try_acquire_or_renew()
    clock.advance(14)  # b first saw this renewTime 14 s ago (at its last look), not 24
    assert not b.try_acquire_or_renew()
    clock.advance(2)
    assert b.try_acquire_or_renew()
    lease = api.read(LEASE)
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a's own view: b holds it and renewed just now


def test_a_leader_renews_with_one_put_and_reads_the_lease_only_when_someone_else_changed_it() -> None:
    api, clock = FakeApi(), FakeClock()
    a = _elector(api, clock, "a")
    assert a.try_acquire_or_renew()  # a GET (none there) and the create
    created = api.read(LEASE)
    mark = len(api.requests)
    for _ in range(3):
        clock.advance(2)
        assert a.try_acquire_or_renew()
    assert [r.verb for r in api.requests[mark:]] == ["PUT"] * 3  # no GET while it holds the lease
    lease = api.read(LEASE)
    assert lease is not None and created is not None
    assert lease["spec"]["renewTime"] > created["spec"]["renewTime"]
    assert {k: lease["spec"][k] for k in ("holderIdentity", "acquireTime", "leaseTransitions",
                                          "leaseDurationSeconds")} == \
        {k: created["spec"][k] for k in ("holderIdentity", "acquireTime", "leaseTransitions", "leaseDurationSeconds")}
    # someone else writes the Lease (an admin's annotation): the renewal's PUT conflicts, the
    # leader reads the Lease, finds it still its own and renews on what it read
    api.edit(LEASE, lambda obj: obj["metadata"].setdefault("annotations", {}).update(note="x"))
    mark = len(api.requests)
    clock.advance(2)
    assert a.try_acquire_or_renew()
    assert [r.verb for r in api.requests[mark:]] == ["PUT", "GET", "PUT"]
    assert (api.read(LEASE) or {})["metadata"]["annotations"] == {"note": "x"}
    mark = len(api.requests)
    clock.advance(2)
    assert a.try_acquire_or_renew()
    assert [r.verb for r in api.requests[mark:]] == ["PUT"]


def test_lease_times_are_written_in_utc_with_microseconds_whatever_the_clocks_zone() -> None:
    """The Lease's MicroTime fields are UTC with a Z. Before the fix the elector formatted the
    clock's time itself and wrote a non-UTC time with a Z (two hours off here)."""
    api = FakeApi()
    clock = FakeClock(datetime(2026, 1, 1, 14, 0, 0, 250, tzinfo=timezone(timedelta(hours=2))))
    assert _elector(api, clock, "a").try_acquire_or_renew()
    spec = (api.read(LEASE) or {})["spec"]
    assert spec["acquireTime"] == spec["renewTime"] == "2026-01-01T12:00:00.000250Z"


def test_of_two_racing_for_an_expired_lease_exactly_one_wins() -> None:
    api, clock = FakeApi(), FakeClock()
    old = _elector(api, clock, "old")
    assert old.try_acquire_or_renew()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock.advance(16)
    # both read the expired lease before either writes: each write waits for the other's
    barrier = threading.Barrier(2, timeout=5)

    def both_read(req: Request) -> None:
        if req.verb == "PUT":
            barrier.wait()

    api.before.append(both_read)
    mark = len(api.requests)
    results: dict[str, bool] = {}
    threads = [threading.Thread(target=lambda e=e: results.__setitem__(e.identity, e.try_acquire_or_renew()))
               for e in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results.values()) == [False, True]
    assert _holder(api) == next(k for k, v in results.items() if v)
    assert sorted(r.verb for r in api.requests[mark:]) == ["GET", "GET", "PUT", "PUT"]  # the loser's PUT: 409


def test_run_leads_renews_and_releases_on_a_clean_stop() -> None:
    api = FakeApi()
    e = _elector(api, SystemClock(), "a", lease_seconds=2, renew_deadline=1, retry_period=0.02)
    stop = threading.Event()
    started, stopped = threading.Event(), threading.Event()
    t = threading.Thread(target=e.run, args=(stop, started.set, stopped.set))
    t.start()
    assert started.wait(5) and e.is_leader
    renewed = api.read(LEASE)["spec"]["renewTime"]  # type: ignore[index]
    threading.Event().wait(0.1)
    stop.set()
    t.join(5)
    assert stopped.is_set() and not e.is_leader
    e.release()
    lease = api.read(LEASE)
    assert lease is not None and lease["spec"]["holderIdentity"] == "" and lease["spec"]["renewTime"] >= renewed


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires() -> None:
    api = FakeApi()
    e = _elector(api, SystemClock(), "a", lease_seconds=2, renew_deadline=0.2, retry_period=0.02)
    stop = threading.Event()
    started, stopped = threading.Event(), threading.Event()
    t = threading.Thread(target=e.run, args=(stop, started.set, stopped.set))
    t.start()
    assert started.wait(5)

    def outage(req: Request) -> None:
        raise ApiError(503, "the API server is unavailable")

    api.before.append(outage)
    assert stopped.wait(5)
    t.join(5)
    assert not e.is_leader and not stop.is_set()
    e.release()  # cannot reach the server: logged, not raised
    api.before.clear()
    assert _holder(api) == "a"  # the lease simply expires for the next leader


def test_release_leaves_someone_elses_lease_alone() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew()
    b.release()
    assert _holder(api) == "a"


def test_the_renew_deadline_must_be_shorter_than_the_lease() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        _elector(FakeApi(), FakeClock(), "a", lease_seconds=5, renew_deadline=5)
