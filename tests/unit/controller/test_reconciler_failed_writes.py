"""A write of a step that fails (an API error, a conflict lost every time) after the step's state
is stored: the step's events and notifications still go out, exactly once, and the next
reconciles finish the writes from the stored state (docs/controller.md, "Guarantees").

Before this, the actuator stopped at the failed write: a repair whose unmark failed was
Succeeded with no ``MaintenanceSucceeded`` ever sent (the record was closed, and the cleanup of
a closed record's leftovers only unmarks), and the same for the other steps whose event came
after a node write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoclusters.controller.statemachine import ClearWarning, Emit, EnsureMarked, Notify, Unmark
from autoclusters.kube import Conflict, KubeError, Unavailable
from autoclusters.kube.json_patch import pointer
from autoclusters.names import (
    EVENT_ESCALATED,
    EVENT_FAILED,
    EVENT_FAULT_CLEARED,
    EVENT_REQUIRED,
    EVENT_SCHEDULED,
    EVENT_STARTED,
    EVENT_SUCCEEDED,
)
from tests.unit.controller.harness import NAMES, Harness
from tests.unit.fakeapi import ApiError, Request

JSON = dict[str, Any]
LABEL = f"/metadata/labels/{pointer(NAMES.maintenance_required)}"
WARNING = f"/metadata/annotations/{pointer(NAMES.drain_deadline)}"


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(retry_errors=True)
    harness.pool()
    harness.node("n1")
    yield harness
    harness.stop()


def _ops(req: Request) -> list[JSON]:
    if req.verb != "PATCH" or req.resource != "nodes" or not isinstance(req.body, list):
        return []
    return [op for op in req.body if op.get("op") != "test"]


def removes_label(req: Request) -> bool:
    return any(op == {"op": "remove", "path": LABEL} for op in _ops(req))


def removes_warning(req: Request) -> bool:
    return any(op == {"op": "remove", "path": WARNING} for op in _ops(req))


def adds_label(req: Request) -> bool:
    return any(op.get("op") == "add" and op.get("path") in (LABEL, "/metadata/labels") for op in _ops(req))


def fail(h: Harness, which: Callable[[Request], bool], error: ApiError, times: int = 1) -> list[str]:
    """The next ``times`` node patches that ``which`` picks are refused with ``error``."""
    failed: list[str] = []

    def refuse(req: Request) -> None:
        if len(failed) < times and which(req):
            failed.append(req.path)
            raise error

    h.api.before.append(refuse)
    return failed


# the unmark refused by the API server, or lost to a writer that changes the node every time
# (the guarded patch reads the node again and gives up after five tries)
REFUSALS = [pytest.param(ApiError(500, "etcdserver: request timed out"), 1, Unavailable, id="server-error"),
            pytest.param(ApiError(409, "the object has been modified", "Conflict"), 5, Conflict, id="conflict")]


def _clean(node: JSON | None) -> bool:
    assert node is not None
    labels = node["metadata"].get("labels") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    annotations = node["metadata"].get("annotations") or {}
    return NAMES.maintenance_required not in labels and not any(t["key"] == NAMES.taint_key for t in taints) \
        and not node["spec"].get("unschedulable") \
        and not any(k in NAMES.warning_annotations or k.startswith(NAMES.drain_ack_prefix) for k in annotations)


@pytest.mark.parametrize(("error", "times", "raised"), REFUSALS)
def test_a_failed_unmark_still_announces_the_success_once_and_the_node_ends_clean(
        h: Harness, error: ApiError, times: int, raised: type[KubeError]) -> None:
    h.start()
    h.run()
    failed = fail(h, removes_label, error, times)
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=30)  # the retry after the backoff
    assert len(failed) == times
    assert [(key, type(e)) for key, e in h.errors] == [("n1", raised)]
    assert h.phase("n1") == "Succeeded"
    assert [e["reason"] for e in h.events(EVENT_SUCCEEDED)] == [EVENT_SUCCEEDED]
    assert h.events(EVENT_SUCCEEDED)[0]["count"] == 1
    assert _clean(h.node_obj("n1"))  # unmarked and uncordoned by the retry (the leftovers' cleanup)


def test_a_failed_first_marking_still_announces_the_repair_and_the_repair_goes_on(h: Harness) -> None:
    """The record is Scheduled when the marking fails: Required and Scheduled went out with it,
    and the next reconcile (Draining) marks the node; every event of the repair once."""
    h.start()
    h.run()
    failed = fail(h, adds_label, ApiError(500, "etcdserver: request timed out"))
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=30)
    assert len(failed) == 1 and len(h.errors) == 1
    reasons = [e["reason"] for e in h.events()]
    assert sorted(reasons) == sorted([EVENT_REQUIRED, EVENT_SCHEDULED, EVENT_STARTED, "MaintenanceDrainWarning",
                                      EVENT_SUCCEEDED])
    assert all(e["count"] == 1 for e in h.events())
    assert _clean(h.node_obj("n1"))


def test_a_failed_repair_whose_write_fails_still_announces_and_notifies_once_and_closes_clean(
        h: Harness) -> None:
    """A replacement that fails: the marking that clears the warning is refused, the failure's
    event and the notification still go out once, the held record clears the warning on its next
    look; when the fault clears, a refused unmark still announces the close once."""
    h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update(
        {"sim.autoclusters.io/fail-reset": "true", "sim.autoclusters.io/fail-replace": "true"}))
    h.start()
    h.run()
    failed = fail(h, removes_warning, ApiError(500, "etcdserver: request timed out"))
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Failed", seconds=300)
    h.run(seconds=30)
    assert h.phase("n1") == "Failed" and len(failed) == 1 and len(h.errors) == 1
    final = [e for e in h.events(EVENT_FAILED) if e["message"].endswith("for a human")]
    assert len(final) == 1 and final[0]["count"] == 1
    assert [e["reason"] for e in h.events(EVENT_ESCALATED)] == [EVENT_ESCALATED]  # the reset's, once
    assert len(h.notes.sent) == 1
    node = h.node_obj("n1")
    assert node is not None and NAMES.maintenance_required in node["metadata"]["labels"]  # held for a human
    assert not any(k in NAMES.warning_annotations for k in node["metadata"].get("annotations") or {})

    h.api.before.clear()
    _fault_clears_and_its_unmark_fails_once(h, "Closed", errors=2)
    assert len(h.notes.sent) == 1


def _fault_clears_and_its_unmark_fails_once(h: Harness, phase: str, *, errors: int) -> None:
    """The fault clears, the record closes as ``phase``, its unmark is refused once: the record
    ends so, the one write failed once (``errors`` counts the harness's retried errors so far),
    the event is sent once, and the node ends clean."""
    failed = fail(h, removes_label, ApiError(500, "etcdserver: request timed out"))
    h.clear_fault("n1")
    h.run(lambda: h.phase("n1") == phase)
    h.run(seconds=30)
    assert h.phase("n1") == phase and len(failed) == 1 and len(h.errors) == errors
    assert len(h.events(EVENT_FAULT_CLEARED)) == 1 and h.events(EVENT_FAULT_CLEARED)[0]["count"] == 1
    assert _clean(h.node_obj("n1"))


def test_a_repair_cancelled_before_it_started_still_announces_when_its_unmark_fails(h: Harness) -> None:
    h.pool(mode="propose")
    h.start()
    h.run()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "AwaitingApproval")
    _fault_clears_and_its_unmark_fails_once(h, "NotNeeded", errors=1)


@pytest.mark.parametrize("write", [Unmark(), ClearWarning(), EnsureMarked(clear_warning=True)])
def test_the_actuator_sends_a_plans_announcements_and_then_raises_the_failed_write(h: Harness, write: Any) -> None:
    """The rule itself, for every write a closing step makes: the writes after the failed one are
    not made, the events and notifications are, and the error is raised for the retry."""
    h.api.edit("/api/v1/nodes/n1", lambda n: (
        n["metadata"]["labels"].update({NAMES.maintenance_required: "true"}),
        n["metadata"]["annotations"].update({NAMES.drain_deadline: "2030-01-01T00:00:00Z"})))
    node = h.node_obj("n1")
    h.api.before.append(lambda req: (_ for _ in ()).throw(ApiError(503, "unavailable"))
                        if req.resource == "nodes" and req.verb == "PATCH" else None)
    plan = (write, Emit("One", "first"), EnsureMarked(cordon=True), Notify("told"), Emit("Two", "second"))
    with pytest.raises(Unavailable):
        h.actuator.run(plan, "n1", node, None, None)
    assert [e["reason"] for e in h.events()] == ["One", "Two"]
    assert [d["message"] for _, d in h.notes.sent] == ["told"]
    assert [r.verb for r in h.api.requests if r.resource == "nodes"] == ["PATCH"]  # the cordon was not tried
