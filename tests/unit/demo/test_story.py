"""The demo's story waits for the event that ends a repair before it lists the node's events:
the controller sends events from a queue after the status write the story follows."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest

from autoclusters.clock import utc_iso_micro
from autoclusters.demo.story import node_events, wait_for_event
from autoclusters.names import EVENT_SUCCEEDED
from tests.unit.fakeapi import FakeApi

EVENTS = "/api/v1/namespaces/default/events"
SOURCE = "nodepool-service"
SINCE = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _event(name: str, reason: str, at: datetime, node: str = "n1", source: str = SOURCE) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "reason": reason, "type": "Normal",
            "involvedObject": {"kind": "Node", "name": node}, "source": {"component": source},
            "eventTime": utc_iso_micro(at), "lastTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _handle(api: FakeApi) -> Any:
    return cast(Any, SimpleNamespace(kube=api.kube()))


def test_it_returns_once_the_event_is_listed() -> None:
    api = FakeApi()
    api.put(EVENTS, _event("n1.a", "MaintenanceStarted", SINCE + timedelta(seconds=1)))
    later = threading.Timer(0.5, api.put, (EVENTS, _event("n1.b", EVENT_SUCCEEDED, SINCE + timedelta(seconds=9))))
    later.start()
    try:
        wait_for_event(_handle(api), "n1", SOURCE, EVENT_SUCCEEDED, SINCE, timeout=10)
    finally:
        later.cancel()
    assert [e["reason"] for e in node_events(_handle(api), "n1", SOURCE)] == ["MaintenanceStarted", EVENT_SUCCEEDED]


@pytest.mark.parametrize("event", [
    _event("n1.old", EVENT_SUCCEEDED, SINCE - timedelta(minutes=5)),  # an earlier repair's
    _event("n2.a", EVENT_SUCCEEDED, SINCE + timedelta(seconds=9), node="n2"),  # another node's
    _event("n1.c", EVENT_SUCCEEDED, SINCE + timedelta(seconds=9), source="someone-else"),  # not the controller's
], ids=["before-since", "another-node", "another-source"])
def test_only_the_controllers_event_about_this_node_since_the_fault_ends_the_wait(event: dict[str, Any]) -> None:
    api = FakeApi()
    api.put(EVENTS, event)
    with pytest.raises(TimeoutError, match=f"no {EVENT_SUCCEEDED} event about n1"):
        wait_for_event(_handle(api), "n1", SOURCE, EVENT_SUCCEEDED, SINCE, timeout=0.5)
