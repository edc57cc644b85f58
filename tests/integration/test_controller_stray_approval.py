"""A stray approval (``maintenance-approved`` without ``maintenance-required``) against the real
control plane: the controller removes it with a Warning event, and an approval given before a
fault never skips the wait under ``propose``. The controller runs under a label domain of its
own (``Env.names``) that no admission policy of the cluster judges, which is what lets the test
write the stray label at all: it stands for one from before the admission rules."""

from __future__ import annotations

import pytest

from autoclusters import names as n
from autoclusters.controller import messages as words
from tests.integration.controller_support import Env
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def test_a_stray_approval_is_removed_and_an_old_one_does_not_approve_a_fresh_fault(ctl: Env) -> None:
    _, (node,) = ctl.pool("propose")
    req, appr = ctl.names.maintenance_required, ctl.names.maintenance_approved
    ctl.approve(node)  # a healthy node: nothing to approve
    event = ctl.wait_reason(node, n.EVENT_STRAY_APPROVAL_REMOVED)
    assert event["type"] == "Warning"
    assert event["message"] == words.stray_approval_removed(appr, "true", req)
    wait_for("the stray approval removed", lambda: appr not in ctl.labels(node))
    assert ctl.records(node) == []
    # An approval and a fault together (in either order the controller may see them): the
    # repair waits for an approval given after it was proposed.
    ctl.approve(node)
    ctl.raise_fault(node)
    ctl.record_in(node, "AwaitingApproval")
    ctl.wait_reason(node, n.EVENT_AWAITING_APPROVAL)
    wait_for("marked, the old approval gone",
             lambda: ctl.labels(node).get(req) == "true" and appr not in ctl.labels(node))
    # the second removal repeats the first event (same words within 10 min): its count moves
    wait_for("the second removal recorded", lambda: sum(
        int(e.get("count") or (e.get("series") or {}).get("count") or 1)
        for e in ctl.events(node) if e["reason"] == n.EVENT_STRAY_APPROVAL_REMOVED) >= 2)
    assert n.EVENT_APPROVED not in ctl.reasons(node)
    assert ctl.records(node)[-1]["status"]["phase"] == "AwaitingApproval"
    ctl.approve(node)
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["status"]["approved"] is True
    wait_for("labels gone", lambda: not ({req, appr} & set(ctl.labels(node))))
