"""Every transition of a node's repair, without a cluster."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from autoclusters import names as n
from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller.statemachine import (
    HOLD_BREAKER,
    HOLD_CONCURRENCY,
    HOLD_NO_PROVIDER,
    HOLD_OPT_OUT,
    HOLD_PROVIDER_REFUSED,
    Decision,
    Drain,
    DriveProvider,
    Emit,
    EnsureMarked,
    Fault,
    HistoryView,
    NodeView,
    Notify,
    Observation,
    Outcome,
    PodsView,
    PoolView,
    ProviderBlock,
    RepairPolicy,
    RepairState,
    Unmark,
    Warn,
    transition,
)
from autoclusters.providers.types import ProviderState, ProviderView

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
XID79 = Fault("gpu", "79", n.REASON_XID, "GPU 3 reported Xid 79 (GPU has fallen off the bus).")
XID48 = Fault("gpu", "48", n.REASON_XID, "GPU 1 reported Xid 48 (Double Bit ECC Error).")
P = RepairPolicy(reset_drain_seconds=300, replace_drain_seconds=600, verify_timeout_seconds=120, poll_seconds=1)


def obs(mode: ConsentMode = ConsentMode.AUTO, fault: Fault | None = XID79,
        action: RepairAction | None = RepairAction.RESET, **kw: object) -> Observation:
    base = Observation(node=NodeView(name="n1", boot_id="boot-1"), fault=fault, fault_action=action,
                       pool=PoolView("pool-a", mode))
    return replace(base, **kw)  # type: ignore[arg-type]


def node(**kw: object) -> NodeView:
    return replace(NodeView(name="n1", boot_id="boot-1"), **kw)  # type: ignore[arg-type]


def reasons(d: Decision) -> list[str]:
    return [a.reason for a in d.actions if isinstance(a, Emit)]


def run(state: RepairState | None, o: Observation, at: datetime = T0, p: RepairPolicy = P) -> Decision:
    return transition(state, o, at, p, record_name="n1-abc")


def to_acting(mode: ConsentMode = ConsentMode.AUTO) -> RepairState:
    d = run(None, obs(mode, node=node(approved=mode == ConsentMode.PROPOSE)))
    assert d.state and d.state.phase == Phase.ACTING, d
    return d.state


# --- decision --------------------------------------------------------------------------
def test_auto_schedules_at_once_and_starts_draining_through_the_chain() -> None:
    d = run(None, obs(pods=PodsView(evictable=2)))
    assert d.state is not None and d.state.phase == Phase.DRAINING
    assert reasons(d) == [n.EVENT_REQUIRED, n.EVENT_SCHEDULED, n.EVENT_STARTED, n.EVENT_DRAIN_WARNING]
    assert "2026-03-01T12:00:00Z" in next(a.message for a in d.actions if isinstance(a, Emit)
                                          and a.reason == n.EVENT_SCHEDULED)
    # one node write for the whole chain: marked, cordoned and warned in one EnsureMarked, nothing repeated
    marks = [a for a in d.actions if isinstance(a, EnsureMarked)]
    assert len(marks) == 1 and isinstance(marks[0], EnsureMarked) and marks[0].cordon and marks[0].warning
    assert len(d.actions) == len(set(d.actions))
    assert [s.phase for s in d.state.steps] == ["Scheduled", "Draining"]


def test_auto_without_pods_goes_straight_to_the_provider() -> None:
    s = to_acting()
    assert s.operation is not None and s.operation.id == "n1-abc-1" and s.operation.boot_id_before == "boot-1"
    assert s.attempts == 1


def test_propose_waits_for_the_label_then_proceeds() -> None:
    d = run(None, obs(ConsentMode.PROPOSE))
    assert d.state and d.state.phase == Phase.AWAITING_APPROVAL
    assert reasons(d) == [n.EVENT_REQUIRED, n.EVENT_AWAITING_APPROVAL]
    again = run(d.state, obs(ConsentMode.PROPOSE))
    assert again.state == d.state and reasons(again) == []
    approved = run(d.state, obs(ConsentMode.PROPOSE, node=node(approved=True)))
    assert approved.state and approved.state.phase == Phase.ACTING and approved.state.approved
    assert reasons(approved)[0] == n.EVENT_APPROVED


def test_off_does_nothing() -> None:
    d = run(None, obs(ConsentMode.OFF))
    assert d.state is None and d.actions == ()


def test_fault_class_off_or_report_only_does_nothing() -> None:
    assert run(None, obs(action=None)).state is None


def test_node_outside_any_pool_is_left_alone() -> None:
    assert run(None, replace(obs(), pool=None)).state is None


def test_fault_cleared_before_start_cleans_up() -> None:
    waiting = run(None, obs(ConsentMode.PROPOSE)).state
    d = run(waiting, obs(ConsentMode.PROPOSE, fault=None))
    assert d.state and d.state.phase == Phase.NOT_NEEDED and d.state.outcome == Outcome.NOT_NEEDED
    assert reasons(d) == [n.EVENT_FAULT_CLEARED]
    assert Unmark(uncordon=False) in d.actions


def test_mode_switched_to_off_cancels_before_start_and_auto_approves() -> None:
    waiting = run(None, obs(ConsentMode.PROPOSE)).state
    off = run(waiting, obs(ConsentMode.OFF))
    assert off.state and off.state.phase == Phase.CLOSED and off.state.outcome == Outcome.CANCELLED
    auto = run(waiting, obs(ConsentMode.AUTO))
    assert auto.state and auto.state.phase == Phase.ACTING


def test_catalog_replace_action_is_used() -> None:
    d = run(None, obs(action=RepairAction.REPLACE))
    assert d.state and d.state.action == RepairAction.REPLACE and d.state.operation
    assert d.state.operation.action == RepairAction.REPLACE


# --- drain -----------------------------------------------------------------------------
def test_drain_evicts_until_empty_then_forces_at_the_deadline() -> None:
    draining = run(None, obs(pods=PodsView(evictable=3))).state
    d = run(draining, obs(pods=PodsView(evictable=3)), T0 + timedelta(seconds=299))
    assert Drain(force=False) in d.actions and d.requeue_after == 1
    late = run(draining, obs(pods=PodsView(evictable=1)), T0 + timedelta(seconds=300))
    assert Drain(force=True) in late.actions
    done = run(draining, obs(pods=PodsView(evictable=0)), T0 + timedelta(seconds=301))
    assert done.state and done.state.phase == Phase.ACTING


def test_replace_drain_deadline_is_longer() -> None:
    draining = run(None, obs(action=RepairAction.REPLACE, pods=PodsView(evictable=1))).state
    d = run(draining, obs(pods=PodsView(evictable=1)), T0 + timedelta(seconds=400))
    assert Drain(force=False) in d.actions


# --- reset and its verification ------------------------------------------------------------
def test_reset_ok_cleans_up_and_succeeds() -> None:
    acting = to_acting()
    d = run(acting, obs(provider=ProviderView(ProviderState.RUNNING)))
    assert d.state == acting and any(isinstance(a, DriveProvider) for a in d.actions)
    done = run(acting, obs(fault=None, node=node(boot_id="boot-2"), provider=ProviderView(ProviderState.SUCCEEDED)))
    assert done.state and done.state.phase == Phase.SUCCEEDED and done.state.outcome == Outcome.SUCCEEDED
    assert Unmark(uncordon=True) in done.actions and reasons(done) == [n.EVENT_SUCCEEDED]


def test_verify_waits_for_the_new_boot_and_a_clear_condition() -> None:
    acting = to_acting()
    v = run(acting, obs(provider=ProviderView(ProviderState.SUCCEEDED), node=node(ready=False))).state
    assert v and v.phase == Phase.VERIFYING
    same_boot = run(v, obs(fault=None), T0 + timedelta(seconds=10))
    assert same_boot.state == v
    still_faulty = run(v, obs(node=node(boot_id="boot-2")), T0 + timedelta(seconds=10))
    assert still_faulty.state == v
    # what it waits for shows on the node, whose every change starts a look: no poll, only the
    # verify timeout's own wake-up (P: 120 s from entering Verifying at T0)
    assert still_faulty.requeue_after == 110 and same_boot.requeue_after == 110


def test_verifying_a_replacement_polls_for_the_new_node() -> None:
    acting = run(replacing(), obs()).state  # drained at once: acting as a replacement
    assert acting and acting.phase == Phase.ACTING
    v = run(acting, obs(provider=ProviderView(ProviderState.SUCCEEDED, new_node="n2"))).state
    assert v and v.phase == Phase.VERIFYING
    d = run(v, obs(replacement_ready=False), T0 + timedelta(seconds=10))
    assert d.state == v and d.requeue_after == P.poll_seconds  # the new node is another key


def test_reset_failed_escalates_to_replace_under_the_same_approval() -> None:
    acting = to_acting(ConsentMode.PROPOSE)
    d = run(acting, obs(ConsentMode.PROPOSE, provider=ProviderView(ProviderState.FAILED, "boom")))
    assert d.state and d.state.action == RepairAction.REPLACE and d.state.escalated
    assert d.state.phase == Phase.DRAINING and d.state.attempts == 1  # no new approval asked
    assert n.EVENT_ESCALATED in reasons(d) and n.EVENT_AWAITING_APPROVAL not in reasons(d)
    # the pods were not listed while the provider acted: the next look (which lists them) drains
    replacing = run(d.state, obs(ConsentMode.PROPOSE))
    assert replacing.state and replacing.state.phase == Phase.ACTING and replacing.state.attempts == 2
    assert any(isinstance(a, DriveProvider) for a in replacing.actions)


def test_a_failed_reset_records_action_failed_then_escalated() -> None:
    d = run(to_acting(), obs(provider=ProviderView(ProviderState.FAILED, "the reboot Job ns/j failed")))
    emits = [a for a in d.actions if isinstance(a, Emit)]
    assert [e.reason for e in emits][:2] == [n.EVENT_FAILED, n.EVENT_ESCALATED]
    assert emits[0].warning and "reset failed" in emits[0].message and "ns/j failed" in emits[0].message
    assert "replacement follows" in emits[1].message
    assert d.state and d.state.phase != Phase.FAILED  # the repair goes on as a replacement


def test_reset_verify_timeout_escalates() -> None:
    acting = to_acting()
    v = run(acting, obs(provider=ProviderView(ProviderState.SUCCEEDED))).state
    d = run(v, obs(node=node(boot_id="boot-2")), T0 + timedelta(seconds=121))
    assert d.state and d.state.action == RepairAction.REPLACE and n.EVENT_ESCALATED in reasons(d)


def test_an_escalation_is_not_held_by_concurrency_or_breaker() -> None:
    acting = to_acting()
    busy = obs(provider=ProviderView(ProviderState.FAILED), pool=PoolView("pool-a", ConsentMode.AUTO, 1, 5, True))
    d = run(acting, busy)
    assert d.state and d.state.phase == Phase.DRAINING  # in progress: it keeps its slot


NO_PROVIDER = ProviderBlock(RepairAction.RESET, HOLD_NO_PROVIDER,
                            "no repair provider configured for reset in pool pool-a (spec.provider)")


def test_no_provider_reports_the_fault_but_holds_the_repair() -> None:
    d = run(None, obs(provider_blocks=(NO_PROVIDER,)))
    assert d.state and d.state.phase == Phase.SCHEDULED and d.state.hold == HOLD_NO_PROVIDER
    assert EnsureMarked() in d.actions and not any(isinstance(a, Drain | DriveProvider) for a in d.actions)
    assert not any(isinstance(a, EnsureMarked) and a.cordon for a in d.actions)
    blocked = [a for a in d.actions if isinstance(a, Emit) and a.reason == n.EVENT_BLOCKED]
    assert len(blocked) == 1 and blocked[0].warning and "no repair provider configured" in blocked[0].message
    again = run(d.state, obs(provider_blocks=(NO_PROVIDER,)))
    assert again.state == d.state and not any(isinstance(a, Emit) for a in again.actions)  # announced once
    started = run(d.state, obs())  # a provider was named: the repair starts
    assert started.state and started.state.phase == Phase.ACTING
    assert [a for a in started.actions if isinstance(a, EnsureMarked)] == [
        EnsureMarked(cordon=True, warning=next(a for a in started.actions if isinstance(a, Warn)))]


def test_no_provider_under_propose_holds_after_the_approval() -> None:
    waiting = run(None, obs(ConsentMode.PROPOSE, provider_blocks=(NO_PROVIDER,))).state
    assert waiting and waiting.phase == Phase.AWAITING_APPROVAL
    d = run(waiting, obs(ConsentMode.PROPOSE, node=node(approved=True), provider_blocks=(NO_PROVIDER,)))
    assert d.state and d.state.phase == Phase.SCHEDULED and d.state.hold == HOLD_NO_PROVIDER


def test_a_block_for_one_action_does_not_hold_the_other() -> None:
    refused = ProviderBlock(RepairAction.REPLACE, HOLD_PROVIDER_REFUSED, "not a simulated node")
    assert run(None, obs(provider_blocks=(refused,))).state.phase == Phase.ACTING  # type: ignore[union-attr]
    d = run(to_acting(), obs(provider=ProviderView(ProviderState.FAILED, "x"), provider_blocks=(refused,)))
    assert d.state and d.state.action == RepairAction.REPLACE and d.state.hold == HOLD_PROVIDER_REFUSED
    assert d.state.phase == Phase.SCHEDULED


def test_verifying_keeps_the_node_marked_and_cordoned() -> None:
    """A node not yet verified takes no work: every Verifying look asks for the marking and the
    cordon (nothing is written when the node carries them; docs/workflow.md, "Decide")."""
    v = run(to_acting(), obs(provider=ProviderView(ProviderState.SUCCEEDED), node=node(ready=False))).state
    assert v and v.phase == Phase.VERIFYING
    still = run(v, obs(node=node(boot_id="boot-2")), T0 + timedelta(seconds=10))
    assert still.state == v and still.actions == (EnsureMarked(cordon=True),)
    s = run(replacing(), obs(provider=ProviderView(ProviderState.SUCCEEDED, new_node="pool-a-beef01"))).state
    assert s and s.phase == Phase.VERIFYING
    waiting = run(s, obs(), T0 + timedelta(seconds=10))  # the new node is not Ready yet; the old one still there
    assert waiting.state == s and waiting.actions == (EnsureMarked(cordon=True),)


# --- replacement --------------------------------------------------------------------------
def replacing() -> RepairState:
    d = run(None, obs(action=RepairAction.REPLACE))
    assert d.state
    return d.state


def test_replace_ok_records_the_new_node() -> None:
    s = run(replacing(), obs(provider=ProviderView(ProviderState.SUCCEEDED, new_node="pool-a-beef01"))).state
    assert s and s.phase == Phase.VERIFYING and s.replacement_node == "pool-a-beef01"
    d = run(s, obs(node=node(exists=False), replacement_ready=True))
    assert d.state and d.state.phase == Phase.SUCCEEDED and reasons(d) == [n.EVENT_SUCCEEDED]
    assert "pool-a-beef01" in d.state.message


def test_replace_failed_holds_labels_and_notifies() -> None:
    d = run(replacing(), obs(provider=ProviderView(ProviderState.FAILED, "no capacity")))
    assert d.state and d.state.phase == Phase.FAILED and d.state.outcome == Outcome.FAILED
    assert reasons(d) == [n.EVENT_FAILED] and any(isinstance(a, Notify) for a in d.actions)
    assert not any(isinstance(a, Unmark) for a in d.actions)
    held = run(d.state, obs())
    assert held.state == d.state and held.actions == (EnsureMarked(clear_warning=True),)
    closed = run(d.state, obs(fault=None))
    assert closed.state and closed.state.phase == Phase.CLOSED and closed.state.outcome == Outcome.FAILED


def test_provider_timeout_counts_as_failure() -> None:
    d = run(replacing(), obs(provider=ProviderView(ProviderState.RUNNING)), T0 + timedelta(seconds=1801))
    assert d.state and d.state.phase == Phase.FAILED


# --- escalation by history -----------------------------------------------------------------
def test_fault_back_within_refault_window_replaces_without_new_approval() -> None:
    h = HistoryView(started_in_window=1, last_reset_at=T0 - timedelta(minutes=5), last_reset_fault=XID79,
                    last_reset_approved=True, last_reset_record="n1-old")
    d = run(None, obs(ConsentMode.PROPOSE, history=h))
    assert d.state and d.state.action == RepairAction.REPLACE and d.state.escalated
    assert d.state.escalated_from == "n1-old" and d.state.phase == Phase.ACTING
    assert n.EVENT_ESCALATED in reasons(d)


def test_same_kind_within_24h_replaces_directly_but_asks_consent() -> None:
    h = HistoryView(started_in_window=1, last_reset_at=T0 - timedelta(hours=3), last_reset_fault=XID79,
                    last_reset_record="n1-old")
    d = run(None, obs(ConsentMode.PROPOSE, fault=XID48, history=h))
    assert d.state and d.state.action == RepairAction.REPLACE and not d.state.escalated
    assert d.state.phase == Phase.AWAITING_APPROVAL


def test_reset_older_than_memory_resets_again() -> None:
    h = HistoryView(started_in_window=1, last_reset_at=T0 - timedelta(hours=25), last_reset_fault=XID79)
    d = run(None, obs(history=h))
    assert d.state and d.state.action == RepairAction.RESET


def test_attempt_budget_exhausted_asks_for_a_human() -> None:
    d = run(None, obs(history=HistoryView(started_in_window=3)))
    assert d.state and d.state.phase == Phase.HUMAN_NEEDED and d.state.outcome == Outcome.BUDGET_EXHAUSTED
    assert n.EVENT_BUDGET_EXHAUSTED in reasons(d) and any(isinstance(a, Notify) for a in d.actions)
    assert run(d.state, obs()).state == d.state


# --- guards -----------------------------------------------------------------------------------
def test_opt_out_pod_blocks_automatic_replacement_once_announced() -> None:
    d = run(None, obs(action=RepairAction.REPLACE, pods=PodsView(evictable=1, opt_out=True)))
    assert d.state and d.state.phase == Phase.SCHEDULED and d.state.hold == HOLD_OPT_OUT
    assert n.EVENT_BLOCKED in reasons(d)
    again = run(d.state, obs(action=RepairAction.REPLACE, pods=PodsView(evictable=1, opt_out=True)))
    assert n.EVENT_BLOCKED not in reasons(again)
    approved = run(d.state, obs(node=node(approved=True), pods=PodsView(evictable=1, opt_out=True)))
    assert approved.state and approved.state.phase == Phase.DRAINING


def test_opt_out_pod_does_not_block_a_reset_but_blocks_its_escalation() -> None:
    d = run(None, obs(pods=PodsView(evictable=1, opt_out=True)))
    assert d.state and d.state.phase == Phase.DRAINING and d.state.opt_out
    acting = run(d.state, obs()).state
    failed = run(acting, obs(provider=ProviderView(ProviderState.FAILED)))
    assert failed.state and failed.state.phase == Phase.SCHEDULED and failed.state.hold == HOLD_OPT_OUT


def test_max_concurrent_repairs_holds_until_a_slot_frees() -> None:
    busy = obs(pool=PoolView("pool-a", ConsentMode.AUTO, max_concurrent=2, in_progress=2))
    d = run(None, busy)
    assert d.state and d.state.hold == HOLD_CONCURRENCY and d.requeue_after == P.hold_recheck_seconds
    free = run(d.state, obs(pool=PoolView("pool-a", ConsentMode.AUTO, max_concurrent=2, in_progress=1)))
    assert free.state and free.state.phase == Phase.ACTING


def test_open_breaker_holds_automatic_repairs_only() -> None:
    open_pool = PoolView("pool-a", ConsentMode.AUTO, breaker_open=True)
    d = run(None, obs(pool=open_pool))
    assert d.state and d.state.hold == HOLD_BREAKER
    proposed = run(None, obs(ConsentMode.PROPOSE, node=node(approved=True),
                             pool=PoolView("pool-a", ConsentMode.PROPOSE, breaker_open=True)))
    assert proposed.state and proposed.state.phase == Phase.ACTING
    closed = run(d.state, obs())
    assert closed.state and closed.state.phase == Phase.ACTING


def test_a_started_repair_completes_when_the_fault_clears_or_the_mode_changes() -> None:
    draining = run(None, obs(pods=PodsView(evictable=1))).state
    d = run(draining, obs(ConsentMode.OFF, fault=None, pods=PodsView(evictable=1)))
    assert d.state and d.state.phase == Phase.DRAINING


def test_node_cordoned_by_someone_else_stays_cordoned() -> None:
    s = run(None, obs(node=node(unschedulable=True))).state
    assert s and s.node_was_cordoned
    done = run(s, obs(fault=None, node=node(boot_id="b2"), provider=ProviderView(ProviderState.SUCCEEDED)))
    assert Unmark(uncordon=False) in done.actions


def test_terminal_state_is_stable() -> None:
    s = run(replacing(), obs(provider=ProviderView(ProviderState.FAILED))).state
    closed = run(s, obs(fault=None)).state
    assert run(closed, obs()).state == closed and run(closed, obs()).actions == ()


def test_acting_requeues_when_the_provider_expects_progress() -> None:
    acting = to_acting()
    d = run(acting, obs(provider=ProviderView(ProviderState.RUNNING, next_check=0.25)))
    assert d.requeue_after == 0.25
    slow = run(acting, obs(provider=ProviderView(ProviderState.RUNNING, next_check=30)))
    assert slow.requeue_after == P.poll_seconds


def test_acting_on_a_provider_whose_progress_shows_on_the_node_waits_for_it() -> None:
    """No poll: the node's change starts the next look; only the provider's own next check or
    the operation's timeout wakes it otherwise."""
    acting = to_acting()
    later = T0 + timedelta(seconds=100)
    d = run(acting, obs(provider=ProviderView(ProviderState.RUNNING, shows_on_node=True)), later)
    assert d.state == acting and d.requeue_after == P.operation_timeout_seconds - 100
    soon = run(acting, obs(provider=ProviderView(ProviderState.RUNNING, next_check=30, shows_on_node=True)), later)
    assert soon.requeue_after == 30
    timed_out = run(acting, obs(provider=ProviderView(ProviderState.RUNNING, shows_on_node=True)),
                    T0 + timedelta(seconds=P.operation_timeout_seconds))
    assert timed_out.state and timed_out.state.escalated
