"""The Remediation record: the one mapping between RepairState and the object, its name, and
which records garbage collection takes."""

from __future__ import annotations

from datetime import UTC, datetime

from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller.remediation_record import record_name, state_of, status_of, status_patch
from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep
from autoclusters.providers.types import Operation
from tests.unit.fakeapi import merge_patch

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_record_status_round_trips() -> None:
    s = RepairState(name="n1-abc", node="n1", pool="a", consent_mode=ConsentMode.PROPOSE,
                    fault=Fault("gpu", "79", "NvidiaXIDError", "GPU 3 reported Xid 79."), phase=Phase.ACTING,
                    action=RepairAction.REPLACE, approved=True, escalated=True, attempts=2, drain_started=T,
                    operation=Operation("n1-abc-2", RepairAction.REPLACE, T, "boot", "a-1234"), created=T,
                    steps=(TimelineStep("Scheduled", T, "x"),))
    obj = {"metadata": {"name": "n1-abc"}, "spec": {"node": "n1", "pool": "a", "consentMode": "propose",
                                                    "action": "reset",
                                                    "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                                                              "message": "GPU 3 reported Xid 79."}},
           "status": status_of(s)}
    assert state_of(obj) == s


def test_record_without_phase_is_undecided() -> None:
    assert state_of({"metadata": {"name": "x"}, "spec": {}}) is None


def test_record_name_is_stable_per_fault_episode() -> None:
    a = record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 0)
    assert a == record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 0)
    assert a != record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 1)
    assert a.startswith("n1-")


def test_garbage_collection_takes_only_old_closed_records() -> None:
    from datetime import timedelta

    from autoclusters.controller.manager import expired

    def record(name: str, phase: str, completed: datetime | None) -> dict:
        status = {"phase": phase, "action": "reset"}
        if completed:
            status["completed"] = completed.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"metadata": {"name": name}, "spec": {"node": "n", "pool": "p", "fault": {}}, "status": status}

    old = T - timedelta(days=91)
    recs = [record("old-done", "Succeeded", old), record("new-done", "Succeeded", T - timedelta(days=89)),
            record("old-failed-holding", "Failed", old), record("old-closed", "Closed", old),
            record("running", "Acting", None)]
    assert expired(recs, T, 90) == ["old-done", "old-closed"]


def test_a_record_object_is_parsed_once_and_a_new_version_anew() -> None:
    from autoclusters.controller import remediation_record as rec

    first = {"metadata": {"name": "r1", "resourceVersion": "1"}, "spec": {"node": "n1", "pool": "a"},
             "status": {"phase": "Draining"}}
    state = rec.state_of(first)
    assert state is not None and rec.state_of(first) is state  # the same object: not parsed again
    second = {**first, "status": {"phase": "Acting"}}
    later = rec.state_of(second)
    assert later is not None and later.phase.value == "Acting" and rec.state_of(first) is state


def test_each_status_holds_its_own_steps_and_an_unknown_phase_is_none() -> None:
    """The steps' status form is kept per step; every status gets copies, so a caller that
    changes one status does not change the next, and a later state's steps read the same."""
    from autoclusters.controller.remediation_record import phase_of

    first = TimelineStep("Scheduled", T, "x")
    s = RepairState(name="n1-abc", node="n1", pool="a", consent_mode=ConsentMode.AUTO,
                    fault=Fault("gpu", "79", "NvidiaXIDError", "m"), phase=Phase.ACTING, action=RepairAction.RESET,
                    steps=(first,))
    one = status_of(s)
    one["steps"][0]["message"] = "changed by a caller"
    later = status_of(s.__class__(**{**s.__dict__, "steps": (first, TimelineStep("Acting", T, "y"))}))
    assert later["steps"] == [{"phase": "Scheduled", "time": "2026-03-01T12:00:00Z", "message": "x"},
                              {"phase": "Acting", "time": "2026-03-01T12:00:00Z", "message": "y"}]
    assert [phase_of({"status": {"phase": p}}) for p in ("Acting", "Nonsense", "", None, 3)] == \
        [Phase.ACTING, None, None, None, None]


def test_the_status_patch_removes_what_the_new_status_no_longer_has() -> None:
    """A merge patch merges objects: without ``null`` for a key gone, an earlier operation's
    provider settings (or an operation itself) would stay in the stored status."""
    old = {"phase": "Acting", "hold": "", "operation": {"id": "r-1", "provider": {
        "type": "hostReboot", "hostReboot": {"image": "x", "timeoutSeconds": 60}}}, "steps": [1]}
    new = {"phase": "Acting", "hold": "", "operation": {"id": "r-2", "provider": {
        "type": "simulated", "simulated": {}}}, "steps": [1, 2]}
    patch = status_patch(old, new)
    assert patch == {"operation": {"id": "r-2", "provider": {"type": "simulated", "simulated": {},
                                                             "hostReboot": None}}, "steps": [1, 2]}
    assert merge_patch(old, patch) == new
    assert status_patch(new, {"phase": "Scheduled"}) == {"phase": "Scheduled", "hold": None,
                                                             "operation": None, "steps": None}
