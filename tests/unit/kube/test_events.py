"""The event recorder: ordered microsecond stamps, the configured source, aggregation."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoclusters.clock import FakeClock, utc_iso_micro
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.names import REFERENCE_EVENT_SOURCE, event_source_error
from tests.unit.fakeapi import FakeApi, Request

EVENTS = "/api/v1/namespaces/default/events"


class EventStore:
    """The events in the fake API server, which the recorder's real client writes to; a
    ``gate`` holds every create until it is set (a slow API server)."""

    def __init__(self) -> None:
        self.api = FakeApi()
        self.kube = self.api.kube()
        self.gate: threading.Event | None = None
        self.api.on_request("POST", EVENTS, self._slow)

    def _slow(self, req: Request) -> None:
        if self.gate is not None:
            self.gate.wait(5)

    @property
    def events(self) -> dict[str, dict[str, Any]]:
        return {e["metadata"]["name"]: e for e in self.api.items(EVENTS)}

    @property
    def order(self) -> list[str]:
        """The events' names in the order they were created."""
        return [e["metadata"]["name"] for kind, e in self.api.changes(EVENTS) if kind == "ADDED"]

    @property
    def creates(self) -> int:
        """Creates asked for, whatever their answer."""
        return self.api.counts()[("POST", "events")]

    def expire(self) -> None:
        """The API server deletes the events (they live an hour)."""
        for name in self.events:
            self.api.remove(f"{EVENTS}/{name}")

    def describe_order(self) -> list[str]:
        """``kubectl describe``: by lastTimestamp only. Ties are ruled out rather than left to the
        order of a sort that is not stable (beyond 12 events): every timestamp must differ."""
        stamps = [e["lastTimestamp"] for e in self.events.values()]
        assert len(set(stamps)) == len(stamps), f"tied lastTimestamps: {stamps}"
        return [e["reason"] for e in sorted(self.events.values(), key=lambda e: e["lastTimestamp"])]

    def events_order(self) -> list[str]:
        """``kubectl events``: series.lastObservedTime, else lastTimestamp, else eventTime."""
        def key(e: dict[str, Any]) -> str:
            return (e.get("series") or {}).get("lastObservedTime") or e.get("lastTimestamp") or e["eventTime"]
        return [e["reason"] for e in sorted(self.events.values(), key=key)]

    def listing_order(self) -> list[str]:
        """The API's listing (by name), which a sort keeps for equal keys."""
        return [self.events[n]["reason"] for n in sorted(self.events)]


NODE = ObjectRef("Node", "gpu-1", uid="u1")


def test_events_emitted_in_the_same_instant_sort_in_emit_order() -> None:
    store, clock = EventStore(), FakeClock(datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC))
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", instance="ctl-a")
    reasons = ["MaintenanceRequired", "MaintenanceAwaitingApproval", "MaintenanceApproved", "MaintenanceStarted"]
    for r in reasons:
        rec.emit(NODE, r, f"{r} text")  # the fake clock does not move: same instant for all
    assert store.describe_order() == store.events_order() == store.listing_order() == reasons
    stamps = [store.events[n]["eventTime"] for n in store.order]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert stamps[0] == "2026-05-01T12:00:00.000000Z" and stamps[3] == "2026-05-01T12:00:00.000003Z"
    # second resolution for readers that sort by it: one second apart, starting at the true second
    seconds = [store.events[n]["lastTimestamp"] for n in store.order]
    assert seconds == ["2026-05-01T12:00:00Z", "2026-05-01T12:00:01Z", "2026-05-01T12:00:02Z", "2026-05-01T12:00:03Z"]
    assert all(store.events[n]["firstTimestamp"] == store.events[n]["lastTimestamp"] for n in store.order)


def test_the_second_stamps_catch_up_with_the_clock_and_are_per_object() -> None:
    store, clock = EventStore(), FakeClock(datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC))
    rec = EventRecorder(store.kube, clock, "autoclusters-controller")
    other = ObjectRef("Node", "gpu-2")
    rec.emit(NODE, "A", "a")
    rec.emit(NODE, "B", "b")  # same second: pushed to :01
    rec.emit(other, "C", "c")  # another object: its own true second
    clock.advance(5)
    rec.emit(NODE, "D", "d")  # later than the pushed stamp: the true second again
    got = {e["reason"]: e["lastTimestamp"][-3:] for e in store.events.values()}
    assert got == {"A": "00Z", "B": "01Z", "C": "00Z", "D": "05Z"}


def test_the_event_is_named_by_its_time_and_carries_what_the_api_requires() -> None:
    store = EventStore()
    EventRecorder(store.kube, FakeClock(), "autoclusters-controller", instance="i").emit(
        NODE, "MaintenanceStarted", "VM reset started.")
    ((name, e),) = store.events.items()
    assert name == "gpu-1." + format(int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) * 10**9, "x")
    assert e["count"] == 1 and e["action"] and e["reportingInstance"] == "i"
    assert e["involvedObject"] == {"kind": "Node", "name": "gpu-1", "apiVersion": "v1", "uid": "u1"}


@pytest.mark.parametrize("source", ["autoclusters-controller", REFERENCE_EVENT_SOURCE])
def test_the_configured_source_is_both_the_component_and_the_reporting_controller(source: str) -> None:
    store = EventStore()
    EventRecorder(store.kube, FakeClock(), source).emit(NODE, "MaintenanceApproved", "x", warning=True)
    (e,) = store.events.values()
    assert e["source"] == {"component": source} and e["reportingComponent"] == source
    assert e["type"] == "Warning"


@pytest.mark.parametrize("bad", ["", "Node Pool", "-x", "a" * 64, "x/", "UPPER.example/x"])
def test_an_invalid_source_is_refused_with_the_reason(bad: str) -> None:
    assert event_source_error(bad)
    with pytest.raises(ValueError, match="qualified name"):
        EventRecorder(EventStore().kube, FakeClock(), bad)


def test_repeats_aggregate_into_a_series_and_sort_by_their_last_occurrence() -> None:
    store, clock = EventStore(), FakeClock()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", aggregate_seconds=600)
    rec.emit(NODE, "MaintenanceBlocked", "held")
    clock.advance(1)
    rec.emit(NODE, "MaintenanceApproved", "ok")
    clock.advance(1)
    rec.emit(NODE, "MaintenanceBlocked", "held")
    rec.emit(NODE, "MaintenanceBlocked", "held")
    assert len(store.events) == 2
    blocked = next(e for e in store.events.values() if e["reason"] == "MaintenanceBlocked")
    assert blocked["series"]["count"] == blocked["count"] == 3
    # the two repeats share an instant; the later one is stamped a microsecond (and a second) after
    assert blocked["series"]["lastObservedTime"] == utc_iso_micro(clock.now() + timedelta(microseconds=1))
    assert blocked["lastTimestamp"] == "2026-01-01T00:00:03Z"
    assert store.describe_order() == store.events_order() == ["MaintenanceApproved", "MaintenanceBlocked"]
    clock.advance(601)  # past the window: a new event
    rec.emit(NODE, "MaintenanceBlocked", "held")
    assert len(store.events) == 3


def test_a_repeat_of_a_deleted_event_creates_it_again() -> None:
    store = EventStore()
    rec = EventRecorder(store.kube, FakeClock(), "autoclusters-controller")
    rec.emit(NODE, "MaintenanceBlocked", "held")
    store.expire()
    rec.emit(NODE, "MaintenanceBlocked", "held")
    assert len(store.events) == 1 and "series" not in next(iter(store.events.values()))


def test_background_sending_keeps_the_order_even_when_a_write_is_slow() -> None:
    store, clock = EventStore(), FakeClock()
    store.gate = threading.Event()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", background=True)
    reasons = [f"R{i}" for i in range(20)]
    for r in reasons:
        rec.emit(NODE, r, r)  # returns at once: the writer is held at the gate
    assert store.order == []
    store.gate.set()
    rec.flush(5)
    assert [store.events[n]["reason"] for n in store.order] == reasons  # written in emit order
    assert store.describe_order() == store.events_order() == store.listing_order() == reasons


def test_several_senders_write_different_objects_side_by_side_and_each_object_in_order() -> None:
    """Two objects on two senders: while a write for one is held, the other's events still go
    out; each object's own events keep their emit order."""
    store, clock = EventStore(), FakeClock()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", background=True,
                        senders=4)
    nodes = [ObjectRef("Node", f"gpu-{i}", uid=f"u{i}") for i in range(40)]
    first = nodes[0]
    other = next(n for n in nodes if rec.sender_of(n) != rec.sender_of(first))
    held = threading.Event()
    release = threading.Event()

    def slow_for_first(req: Request) -> None:
        if req.body["involvedObject"]["name"] == first.name:
            held.set()
            assert release.wait(5), "never released"

    store.api.on_request("POST", EVENTS, slow_for_first)
    rec.emit(first, "R0", "r0")
    assert held.wait(5)
    for i in range(1, 4):
        rec.emit(first, f"R{i}", f"r{i}")
        rec.emit(other, f"O{i}", f"o{i}")
    deadline = time.monotonic() + 5
    while len(store.order) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    # the other object's three events are written while the first object's sender is held
    assert [store.events[n]["reason"] for n in store.order] == ["O1", "O2", "O3"]
    release.set()
    rec.flush(5)
    written = [store.events[n] for n in store.order]
    assert [e["reason"] for e in written if e["involvedObject"]["name"] == first.name] == ["R0", "R1", "R2", "R3"]


def test_senders_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="senders"):
        EventRecorder(EventStore().kube, FakeClock(), "autoclusters-controller", background=True,
                      senders=0)


def flaky(failures: int, status: int, lands: bool = False) -> EventStore:
    """The events API through an API server that goes away: ``failures`` creates answer
    ``status`` (after writing, with ``lands``: the answer is lost, not the write)."""
    store = EventStore()
    store.api.fail_next("POST", EVENTS, status, times=failures, lands=lands)
    return store


@pytest.mark.parametrize("lands", [False, True], ids=["write-lost", "answer-lost"])
def test_a_sender_tries_an_event_again_while_the_api_server_is_away_and_writes_it_once(lands: bool) -> None:
    store, clock = flaky(3, 503, lands=lands), FakeClock()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", background=True,
                        retry_seconds=60, retry_first=0.5, retry_max=2)
    start = clock.monotonic()
    rec.emit(NODE, "MaintenanceStarted", "a")
    rec.emit(NODE, "MaintenanceSucceeded", "b")
    rec.flush(5)
    assert [store.events[n]["reason"] for n in store.order] == ["MaintenanceStarted", "MaintenanceSucceeded"]
    assert len(store.events) == 2  # the landed create is the event, not a second one beside it
    # lost writes: the first event waited 0.5 s doubling, at most retry_max; lost answers: each
    # event's second try found its own create and stopped there
    assert clock.monotonic() - start == (0.5 + 0.5 if lands else 0.5 + 1 + 2)


@pytest.mark.parametrize(("status", "tries"), [(422, 1), (403, 3), (503, 4)],
                         ids=["invalid", "forbidden", "unavailable"])
def test_a_refused_event_is_tried_once_a_forbidden_one_briefly_a_passing_failure_for_retry_seconds(
        status: int, tries: int) -> None:
    store, clock = flaky(100, status), FakeClock()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", background=True,
                        retry_seconds=10, retry_first=1, retry_max=4, forbidden_seconds=3)
    rec.emit(NODE, "MaintenanceStarted", "a")
    rec.flush(5)
    assert store.events == {}
    # refused: one try; forbidden: tries after 1 and 2 s, none past 3 s; unreachable: tries after
    # 1, 2, 4 s, and none that would end past 10 s
    assert store.creates == tries


def test_an_event_refused_while_a_restarted_api_servers_authorizer_starts_is_written() -> None:
    """A restarted kube-apiserver answers 403 until its RBAC informers have synced: the event waits."""
    store, clock = flaky(2, 403), FakeClock()
    rec = EventRecorder(store.kube, clock, "autoclusters-controller", background=True, retry_first=0.5)
    rec.emit(NODE, "MaintenanceStarted", "a")
    rec.flush(5)
    assert [store.events[n]["reason"] for n in store.order] == ["MaintenanceStarted"]


def test_an_inline_recorder_never_waits_to_try_again() -> None:
    store, clock = flaky(1, 503), FakeClock()
    EventRecorder(store.kube, clock, "autoclusters-controller").emit(NODE, "MaintenanceStarted", "a")
    assert store.creates == 1 and store.events == {} and clock.monotonic() == 1000.0
