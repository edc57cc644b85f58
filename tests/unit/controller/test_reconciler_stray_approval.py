"""An approval label that no maintenance-required backs (a stray) approves nothing: the
controller removes it with a Warning event before it decides anything, and never counts it.
Admission refuses such a label on every write path (issue 25); these are the ones that
predate the rule or came through a path it did not cover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autoclusters.controller import messages as words
from autoclusters.names import EVENT_APPROVED, EVENT_AWAITING_APPROVAL, EVENT_REQUIRED, EVENT_STRAY_APPROVAL_REMOVED
from tests.unit.controller.harness import NAMES, Harness
from tests.unit.fakeapi import ApiError, Request

REQ, APPR = NAMES.maintenance_required, NAMES.maintenance_approved


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def _labels(h: Harness, node: str) -> dict[str, str]:
    obj = h.node_obj(node)
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


def _set_labels(h: Harness, node: str, **changes: str | None) -> None:
    """A user's write of the two labels (None removes one), as the fake API takes it."""
    def change(n: dict) -> None:
        labels = n["metadata"].setdefault("labels", {})
        for key, value in changes.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
    h.api.edit(f"/api/v1/nodes/{node}", change)


def _stray_events(h: Harness) -> list[dict]:
    return h.events(EVENT_STRAY_APPROVAL_REMOVED)


def _healthy_node(h: Harness, mode: str) -> None:
    """Node n1 in pool p (consent mode ``mode``), the controller started and settled."""
    h.pool(mode=mode)
    h.node("n1")
    h.start()
    h.run()


def test_a_stray_approval_on_a_healthy_node_is_removed_with_a_warning(h: Harness) -> None:
    _healthy_node(h, "propose")
    _set_labels(h, "n1", **{APPR: "true"})
    h.run(seconds=10)
    assert APPR not in _labels(h, "n1")
    [event] = _stray_events(h)
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "n1"
    assert event["message"] == words.stray_approval_removed(APPR, "true", REQ)
    assert APPR in event["message"] and REQ in event["message"] and "approved nothing" in event["message"]
    assert h.records("n1") == []
    h.run(seconds=10)
    assert len(_stray_events(h)) == 1  # once: the node's next reconciles find nothing to remove


def test_a_stray_of_any_value_is_removed_and_named_with_its_value(h: Harness) -> None:
    _healthy_node(h, "auto")
    _set_labels(h, "n1", **{APPR: "yes"})
    h.run(seconds=10)
    assert APPR not in _labels(h, "n1")
    [event] = _stray_events(h)
    assert f"{APPR}=yes" in event["message"]


def test_an_old_approval_does_not_skip_the_wait_on_a_fresh_fault(h: Harness) -> None:
    """The approval was on the node before the fault: under propose the repair still waits, the
    stray goes before the repair is decided (its event first), and an approval given now counts.
    The cleanup removes the approval with maintenance-required in one write: no second stray."""
    h.pool(mode="propose")
    h.node("n1", **{APPR: "true"})  # from before the rule, and the fault with it: one reconcile sees both
    h.fault("n1")
    h.start()
    h.run(seconds=30)
    assert h.phase("n1") == "AwaitingApproval"
    labels = _labels(h, "n1")
    assert labels.get(REQ) == "true" and APPR not in labels
    reasons = [e["reason"] for e in sorted(h.events(), key=lambda e: e["eventTime"])]
    assert reasons[:3] == [EVENT_STRAY_APPROVAL_REMOVED, EVENT_REQUIRED, EVENT_AWAITING_APPROVAL]
    assert EVENT_APPROVED not in reasons
    _set_labels(h, "n1", **{APPR: "true"})
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert h.phase("n1") == "Succeeded"
    labels = _labels(h, "n1")
    assert REQ not in labels and APPR not in labels
    assert len(_stray_events(h)) == 1


def test_an_approval_left_after_required_was_taken_off_mid_repair_is_not_counted(h: Harness) -> None:
    """Mid-repair, someone removed maintenance-required and added an approval in one write (the
    status path before issue 25): the approval is stray; the repair keeps waiting and the
    controller puts its label back."""
    _healthy_node(h, "propose")
    h.fault("n1")
    h.run(seconds=10)
    assert h.phase("n1") == "AwaitingApproval"
    _set_labels(h, "n1", **{REQ: None, APPR: "true"})
    h.run(seconds=30)
    assert h.phase("n1") == "AwaitingApproval"
    assert not h.events(EVENT_APPROVED)
    assert len(_stray_events(h)) == 1
    labels = _labels(h, "n1")
    assert APPR not in labels and labels.get(REQ) == "true"


def test_an_approval_that_required_backs_by_the_time_of_the_write_is_kept(h: Harness) -> None:
    """The removal tests the labels as read: when maintenance-required was written between the
    read and the removal (another replica marked the node), the approval is valid and stays."""
    _healthy_node(h, "propose")
    _set_labels(h, "n1", **{APPR: "true"})
    h.api.settle()

    def marked_meanwhile(req: Request) -> None:
        if req.verb == "PATCH" and req.resource == "nodes" and any(
                op.get("op") == "remove" and op.get("path", "").endswith("maintenance-approved")
                for op in req.body if isinstance(op, dict)):
            h.api.before.clear()
            h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update({REQ: "true"}))

    h.api.before.append(marked_meanwhile)
    read = h.fleet.node("n1")
    assert read is not None and REQ not in read["metadata"]["labels"]
    written = h.actuator.remove_stray_approval(read)
    assert not h.api.before  # the removal was tried, and lost the race
    labels = _labels(h, "n1")
    assert labels.get(APPR) == "true" and labels.get(REQ) == "true"
    assert written["metadata"]["labels"] == labels  # the node read again, nothing written
    assert _stray_events(h) == []


def test_a_pool_in_consent_mode_off_gets_no_write(h: Harness) -> None:
    _healthy_node(h, "off")
    _set_labels(h, "n1", **{APPR: "true"})
    h.run(seconds=10)
    assert _labels(h, "n1").get(APPR) == "true"
    assert _stray_events(h) == []


def test_a_failed_removal_holds_nothing_and_the_marking_takes_the_stray_with_it(h: Harness) -> None:
    """The removal on its own refused (another webhook, say): the fault is still handled; the
    repair is decided without counting the stray, so under propose it waits; and the write that
    adds maintenance-required removes the stray in the same patch, so the label it lacked never
    turns it into an approval."""
    h.pool(mode="propose")
    h.node("n1", **{APPR: "true"})
    h.fault("n1")

    def refuse_the_removal_alone(req: Request) -> None:
        if req.verb == "PATCH" and req.resource == "nodes" and any(
                op.get("op") == "test" and op.get("path") == "/metadata/labels" for op in req.body):
            raise ApiError(403, "denied by another admission webhook", reason="Forbidden")

    h.api.before.append(refuse_the_removal_alone)
    h.start()
    h.run(seconds=30)
    assert h.phase("n1") == "AwaitingApproval"
    labels = _labels(h, "n1")
    assert labels.get(REQ) == "true" and APPR not in labels
    assert not h.events(EVENT_APPROVED)
    [event] = _stray_events(h)
    assert event["message"] == words.stray_approval_removed(APPR, "true", REQ)


def test_an_approval_given_as_the_cleanup_runs_goes_with_maintenance_required(h: Harness) -> None:
    """The cleanup's patch tests the labels as read: a person's approval that lands between the
    read and the write fails it, and the patch computed again removes both labels in one write."""
    _healthy_node(h, "auto")
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Verifying", seconds=60)
    landed = []

    def approved_meanwhile(req: Request) -> None:
        if req.verb == "PATCH" and req.resource == "nodes" and any(
                op.get("op") == "remove" and op.get("path", "").endswith("maintenance-required") for op in req.body):
            h.api.before.clear()
            h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update({APPR: "true"}))
            landed.append(True)

    h.api.before.append(approved_meanwhile)
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=10)
    assert landed and h.phase("n1") == "Succeeded"
    labels = _labels(h, "n1")
    assert REQ not in labels and APPR not in labels
    assert _stray_events(h) == []  # removed by the cleanup itself, not left as a stray
