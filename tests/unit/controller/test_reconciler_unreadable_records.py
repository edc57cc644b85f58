"""A Remediation record the controller cannot read (issue 28, "bad state at rest"): an action
outside the enum, an operation without an id, a phase from a newer version, a damaged field.
Each is reported (a Warning event on its node, once per version of the record, and a metric),
left exactly as it is, and never stops the garbage collector or another node's reconcile."""

from __future__ import annotations

import copy
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoclusters.controller import remediation_record as rec
from autoclusters.controller.controller_metrics import unreadable_records
from autoclusters.controller.manager import expired
from autoclusters.names import EVENT_RECORD_UNREADABLE
from tests.unit import builders
from tests.unit.controller.harness import Harness

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JSON = dict[str, Any]


def _record(name: str = "n1-abc", node: str = "n1", **status: Any) -> JSON:
    rec = builders.record(name, node, "p", phase="Acting", mode="auto")
    rec["status"].update(action="reset", **status)
    return rec


_OP = {"id": "n1-abc-1", "action": "reset", "started": "2026-03-01T12:00:00Z"}
MALFORMED = {
    "an operation action outside the enum": (_record(operation={**_OP, "action": "powercycle"}),
                                              "status.operation.action 'powercycle' is not one of reset, replace"),
    "an operation without an id": (_record(operation={k: v for k, v in _OP.items() if k != "id"}),
                                   "status.operation has no id"),
    "an operation that is not an object": (_record(operation="n1-abc-1"), "status.operation is not an object"),
    "a phase from a newer version": (_record(phase="Quarantined"), "status.phase 'Quarantined' is not a phase"),
    "a consent mode outside the enum": ({**_record(), "spec": {**_record()["spec"], "consentMode": "maybe"}},
                                        "'maybe' is not a valid ConsentMode"),
    "a damaged count": (_record(attempts="two"), "invalid literal for int()"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_each_malformed_record_is_unreadable_with_the_record_and_field_named(case: str) -> None:
    obj, why = MALFORMED[case]
    with pytest.raises(rec.UnreadableRecord) as first:
        rec.state_of(obj)
    assert str(first.value).startswith("Remediation n1-abc: ") and why in str(first.value)
    with pytest.raises(rec.UnreadableRecord) as again:  # the verdict is kept per object, a new error each time
        rec.state_of(obj)
    assert again.value is not first.value and str(again.value) == str(first.value)


def test_a_readable_record_and_one_without_a_phase_yet_are_not_unreadable() -> None:
    assert rec.state_of(_record(operation=_OP)) is not None
    assert rec.state_of({"metadata": {"name": "x"}, "spec": {}, "status": {}}) is None
    assert unreadable_records([_record(operation=_OP), *(o for o, _ in MALFORMED.values())]) == {"p": len(MALFORMED)}


def test_garbage_collection_passes_over_unreadable_records_and_takes_the_rest() -> None:
    old = (T - timedelta(days=91)).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = _record("old-done", phase="Succeeded", completed=old)
    broken = _record("old-broken", phase="Succeeded", completed=old, operation={**_OP, "action": "?"})
    assert expired([broken, done, *(o for o, _ in MALFORMED.values())], T, 90) == ["old-done"]


def test_the_collector_thread_outlives_a_failing_round() -> None:
    from autoclusters.controller.manager import Controller

    class Collector:  # the manager's loop over a collection that raises, then counts rounds
        config = type("C", (), {"gc_interval_seconds": 0.0})()
        stop_event = threading.Event()
        rounds = 0
        _every = Controller._every

        def collect_garbage(self) -> int:
            self.rounds += 1
            if self.rounds == 1:
                raise RuntimeError("a bug of the collector's own")
            if self.rounds == 3:
                self.stop_event.set()
            return 0

    c = Collector()
    Controller._gc_loop(c)  # type: ignore[arg-type]
    assert c.rounds == 3


def test_a_node_with_an_unreadable_record_is_held_and_reported_once_while_others_are_repaired() -> None:
    h = Harness()
    h.pool()
    h.pool("q")  # a record that cannot be read still holds its slot in its own pool (maxConcurrentRepairs)
    h.node("n1")
    h.node("n2", pool="q")
    h.start()
    try:
        h.fault("n1")
        h.run(lambda: h.phase("n1") == "Acting", seconds=60)
        broken = copy.deepcopy(h.records("n1")[0])
        broken["status"]["operation"]["action"] = "powercycle"  # hand-edited, or a newer version's action
        stored = h.api.put(h.record_path(broken["metadata"]["name"]), broken)
        h.fault("n2")
        h.run(lambda: h.phase("n2") == "Succeeded", seconds=120)
        assert h.phase("n2") == "Succeeded"  # the other node's repair went on
        for key in ("n1", "n1"):  # resync looks again: still one event for this version
            h.queue.add(key)
            h.run(seconds=1)
        assert [r["metadata"]["name"] for r in h.records("n1")] == [stored["metadata"]["name"]]  # no second repair
        assert h.records("n1")[0]["status"] == stored["status"]  # left as it is
        events = h.events(EVENT_RECORD_UNREADABLE)
        assert len(events) == 1 and events[0].get("count", 1) == 1  # not repeated (nor aggregated) per resync
        assert events[0]["involvedObject"]["name"] == "n1" and events[0]["type"] == "Warning"
        assert "status.operation.action 'powercycle'" in events[0]["message"]
        assert f"kubectl delete remediation {stored['metadata']['name']}" in events[0]["message"]
    finally:
        h.stop()
