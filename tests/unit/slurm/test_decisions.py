"""The bridge's decisions for one node, read like the contract with the controller."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TypeVar

from autoclusters.pools.slurm_policy import SlurmPolicy
from autoclusters.slurm import decisions as d
from autoclusters.slurm.commands import SlurmJob, SlurmNode

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
REPAIR = d.Repair(record="a100-0-xid-79-1", reason="Xid 79 on GPU 3 (remediation a100-0-xid-79-1)",
                  deadline=T0 + timedelta(seconds=120))
OURS = "autoclusters: Xid 79 on GPU 3 (remediation a100-0-xid-79-1)"
POLICY = SlurmPolicy(enabled=True, signal="TERM", signal_lead_seconds=30)


def node(state: str = "mixed", flags: tuple[str, ...] = (), reason: str = "") -> SlurmNode:
    return SlurmNode("a100-0", state, frozenset(flags), reason)


def job(state: str = "RUNNING", requeue: bool = True, restarts: int = 0, job_id: str = "7") -> SlurmJob:
    return SlurmJob(job_id, state, requeue, restarts, True, "a100-[0-1]")


def obs(slurm: SlurmNode | None, *, at: float = 0, repair: d.Repair | None = REPAIR, jobs: tuple = (),
        signalled: dict | None = None, ack: str = "", maintenance: bool = True, cordoned: bool = False,
        cordoned_by_us: bool = False, note: str = "") -> d.SlurmObservation:
    return d.SlurmObservation("a100-0", "a100-0", T0 + timedelta(seconds=at), repair, maintenance, ack, cordoned,
                         cordoned_by_us, slurm, note, tuple(jobs), signalled or {})


def kinds(actions: list[d.SlurmEffect]) -> list[str]:
    return [type(a).__name__ for a in actions]


E = TypeVar("E", bound=d.SlurmEffect)


def effect(action: d.SlurmEffect, kind: type[E]) -> E:
    """``action`` as the effect ``kind`` it must be."""
    assert isinstance(action, kind), action
    return action


def test_a_warned_node_is_drained_with_the_fault_as_reason_and_its_jobs_signalled() -> None:
    actions = d.decide(obs(node(), jobs=(job(),)), d.Memory(record=REPAIR.record), POLICY)
    assert actions[0] == d.SlurmDrain(OURS)
    assert d.Signal(job(), "TERM") in actions
    assert not any(isinstance(a, d.Ack) for a in actions)


def test_a_signalled_job_is_requeued_after_its_lead_time_not_before() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0})
    busy = node("mixed", ("drain",), OURS)
    assert d.decide(obs(busy, at=29, jobs=(job(),), signalled={"7": job()}), mem, POLICY) == []
    assert kinds(d.decide(obs(busy, at=30, jobs=(job(),), signalled={"7": job()}), mem, POLICY)) == ["Requeue"]


def test_a_job_that_saved_and_exited_is_requeued_at_once_but_a_completed_one_is_not() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0})
    drained = node("idle", ("drain",), OURS)
    failed = d.decide(obs(drained, at=5, signalled={"7": job("FAILED")}), mem, POLICY)
    assert kinds(failed) == ["Requeue"] and "FAILED" in effect(failed[0], d.Requeue).why
    done = d.decide(obs(drained, at=5, signalled={"7": job("COMPLETED")}), mem, POLICY)
    assert done == [d.Ack(REPAIR.record)]


def test_the_deadline_requeues_what_is_still_running() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0})
    slow = SlurmPolicy(enabled=True, signal_lead_seconds=600)
    busy = node("allocated", ("drain",), OURS)
    acts = d.decide(obs(busy, at=121, jobs=(job(),), signalled={"7": job()}), mem, slow)
    assert kinds(acts) == ["Requeue", "Report"] and effect(acts[1], d.Report).reason == d.EVENT_DEADLINE


def test_ack_only_when_drained_not_draining_and_every_job_settled() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0}, requeued={"7"})
    completing = node("idle", ("drain", "completing"), OURS)
    assert d.decide(obs(completing, at=40), mem, POLICY) == []
    drained = node("idle", ("drain",), OURS)
    assert d.decide(obs(drained, at=41), mem, POLICY) == [d.Ack(REPAIR.record)]
    # Once acked (the annotation names this record), nothing more to do.
    assert d.decide(obs(drained, at=42, ack=REPAIR.record), mem, POLICY) == []
    # An ack naming an earlier repair does not count.
    assert d.decide(obs(drained, at=42, ack="old-record"), mem, POLICY) == [d.Ack(REPAIR.record)]


def test_a_requeue_seen_in_slurm_counts_as_done() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0})
    drained = node("idle", ("drain",), OURS)
    for seen in (job("PENDING", restarts=1), job("RUNNING", restarts=1)):
        assert d.decide(obs(drained, at=5, signalled={"7": seen}), mem, POLICY) == [d.Ack(REPAIR.record)]


def test_a_job_that_cannot_be_requeued_is_reported_and_waited_for() -> None:
    mem = d.Memory(record=REPAIR.record, signalled={"7": T0}, restarts_at_signal={"7": 0})
    busy = node("mixed", ("drain",), OURS)
    acts = d.decide(obs(busy, at=40, jobs=(job(requeue=False),), signalled={"7": job(requeue=False)}), mem, POLICY)
    assert kinds(acts) == ["Report"] and effect(acts[0], d.Report).reason == d.EVENT_NOT_REQUEUEABLE


def test_an_admins_drain_is_neither_overwritten_nor_resumed() -> None:
    admin = node("idle", ("drain",), "bad DIMM, ticket 42")
    during = d.decide(obs(admin, at=1), d.Memory(record=REPAIR.record), POLICY)
    assert not any(isinstance(a, d.SlurmDrain) for a in during)
    assert [a.reason for a in during if isinstance(a, d.Report)] == [d.EVENT_EXTERNAL]
    assert d.Ack(REPAIR.record) in during  # drained (by the admin) with nothing running: ready
    after = d.decide(obs(admin, repair=None, maintenance=False), d.Memory(), POLICY)
    assert not any(isinstance(a, d.Resume) for a in after)
    assert [a.reason for a in after if isinstance(a, d.Report)] == [d.EVENT_EXTERNAL]


def test_an_external_drain_is_reported_once() -> None:
    admin = node("idle", ("drain",), "HealthCheck: gpu")
    mem = d.Memory(reported={"external:HealthCheck: gpu"})
    assert d.decide(obs(admin, repair=None, maintenance=False, note="HealthCheck: gpu"), mem, POLICY) == []


def test_an_external_drain_is_noted_on_the_node_for_status_and_the_note_removed_after() -> None:
    admin = SlurmNode("a100-0", "idle", frozenset({"drain"}), "bad DIMM", "alice", "2026-11-30T09:00:00")
    acts = d.decide(obs(admin, repair=None, maintenance=False), d.Memory(), POLICY)
    assert d.Note("bad DIMM by alice at 2026-11-30T09:00:00") in acts
    assert d.decide(obs(node("idle"), repair=None, maintenance=False, note="bad DIMM"), d.Memory(),
                    POLICY) == [d.Note("")]


def test_act_on_external_drains_cordons_and_uncordons_only_what_it_cordoned() -> None:
    acting = SlurmPolicy(enabled=True, act_on_external_drains=True)
    admin = node("idle", ("drain",), "bad DIMM")
    assert d.KubeCordon(True) in d.decide(obs(admin, repair=None, maintenance=False), d.Memory(), acting)
    idle = node("idle")
    assert d.decide(obs(idle, repair=None, maintenance=False, cordoned=True, cordoned_by_us=True), d.Memory(),
                    acting) == [d.KubeCordon(False)]
    assert d.decide(obs(idle, repair=None, maintenance=False, cordoned=True), d.Memory(), acting) == []


def test_resume_only_after_the_repair_and_the_maintenance_label_are_gone() -> None:
    mine = node("idle", ("drain",), OURS)
    assert d.decide(obs(mine, repair=None, maintenance=True), d.Memory(), POLICY) == []
    assert d.decide(obs(mine, repair=None, maintenance=False), d.Memory(), POLICY) == [d.Resume(OURS)]
    ended = d.decide(obs(mine, repair=None, maintenance=False), d.Memory(record=REPAIR.record), POLICY)
    assert ended == [d.Forget(), d.Resume(OURS)]


def test_a_stale_reason_of_ours_is_replaced_by_this_repairs() -> None:
    stale = node("idle", ("drain",), "autoclusters: ECC on GPU 1 (remediation old)")
    assert d.decide(obs(stale), d.Memory(record=REPAIR.record), POLICY) == [d.SlurmDrain(OURS)]


def test_a_node_slurm_does_not_know_is_acked_with_a_warning() -> None:
    acts = d.decide(obs(None), d.Memory(record=REPAIR.record), POLICY)
    assert kinds(acts) == ["Report", "Ack"] and effect(acts[0], d.Report).reason == d.EVENT_NOT_FOUND


def test_without_a_signal_the_lead_time_still_runs_before_the_requeue() -> None:
    quiet = SlurmPolicy(enabled=True, signal="", signal_lead_seconds=10)
    acts = d.decide(obs(node(), jobs=(job(),)), d.Memory(record=REPAIR.record), quiet)
    assert d.Signal(job(), "") in acts
