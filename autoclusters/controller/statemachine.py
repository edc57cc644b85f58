"""The whole life of one node's repair, as one pure transition function.

``transition(state, observation, now, policy)`` returns the next state, the actions the
reconciler must carry out and when to look again. Nothing here talks to the API server
or reads a clock: the reconciler observes the cluster, calls this function, persists the
new state (the ``Remediation`` record's status, guarded by its resourceVersion) and only
then carries out the actions. Every action is either idempotent or derived again from
the persisted state on the next reconcile, so a crash between any two steps resumes
without losing or doubling a repair.

Read it top to bottom: ``_decide`` (no record yet) → AwaitingApproval → Scheduled
(guards) → Draining (first the warning and the pre-drain wait, then eviction) → Acting
(the provider) → Verifying → Succeeded; failures escalate a
reset to a replacement under the same approval, and a failed replacement holds the node
(Failed) until its fault clears or a human acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

import autoclusters.controller.messages as words
from autoclusters import api, pool_fields
from autoclusters import names as n

# The enums of the API are written once in autoclusters/api.py; import them from there (mypy's
# implicit_reexport = false for this module, pyproject.toml, rejects importing them from here).
from autoclusters.api import IN_PROGRESS, TERMINAL, ConsentMode, Phase
from autoclusters.clock import utc_iso
from autoclusters.providers.actions import ACTIONS, Deadline, Proof
from autoclusters.providers.types import Operation, ProviderState, ProviderView


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    NOT_NEEDED = "NotNeeded"
    FAILED = "Failed"
    BUDGET_EXHAUSTED = "AttemptBudgetExhausted"
    CANCELLED = "Cancelled"


# Named reasons a Scheduled repair is held; each is announced once with MaintenanceBlocked.
HOLD_OPT_OUT = "OptOutPod"
HOLD_CONCURRENCY = "MaxConcurrentRepairs"
HOLD_BREAKER = "CircuitBreakerOpen"
# ... and the provider holds: the pool names no provider for the action, its settings are
# invalid, or the provider will not act on this node. Never a guess: the repair waits.
HOLD_NO_PROVIDER = "NoRepairProvider"
HOLD_PROVIDER_INVALID = "InvalidProviderSettings"
HOLD_PROVIDER_REFUSED = "ProviderRefusedNode"
# the pool names a command, image or URL that is no entry of the operator's allow-lists
HOLD_NOT_ALLOW_LISTED = "NotAllowListed"
PROVIDER_HOLDS = (HOLD_NO_PROVIDER, HOLD_PROVIDER_INVALID, HOLD_PROVIDER_REFUSED, HOLD_NOT_ALLOW_LISTED)


# --- what is persisted -----------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    fault_class: str
    code: str
    reason: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.fault_class}:{self.code}"


@dataclass(frozen=True)
class TimelineStep:
    phase: str
    time: datetime
    message: str


@dataclass(frozen=True)
class RepairState:
    name: str  # the Remediation record
    node: str
    pool: str
    consent_mode: ConsentMode
    fault: Fault
    phase: Phase
    action: str  # an action of the table (providers/actions.py)
    approved: bool = False  # an approval (label, or inherited) covers this repair and its escalation
    escalated: bool = False
    escalated_from: str = ""  # the record whose reset this replacement follows
    opt_out: bool = False  # an opt-out pod was on the node when the repair started
    attempts: int = 0  # provider operations started
    node_was_cordoned: bool = False  # someone else cordoned it: leave it cordoned at the end
    drain_started: datetime | None = None  # the warning went out and the node was cordoned
    pre_drain_deadline: datetime | None = None  # eviction starts at the latest then (the warning's deadline)
    warning_attempt: int = 1  # the provider operation (1: the first) whose drain the warning went out for
    eviction_started: datetime | None = None  # the pre-drain wait ended: evicting (never waits again)
    operation: Operation | None = None
    verify_started: datetime | None = None
    hold: str = ""
    outcome: str = ""
    message: str = ""
    replacement_node: str = ""
    created: datetime | None = None
    completed: datetime | None = None
    steps: tuple[TimelineStep, ...] = ()

    @property
    def started(self) -> bool:
        return self.attempts > 0 or self.phase in IN_PROGRESS


# --- what the reconciler observed ------------------------------------------------------
@dataclass(frozen=True)
class NodeView:
    name: str = ""
    exists: bool = True
    ready: bool = True
    boot_id: str = ""
    unschedulable: bool = False
    approved: bool = False  # carries maintenance-approved=true
    warned_for: str = ""  # the record named by the node's <domain>/remediation annotation
    drain_acks: Mapping[str, str] = field(default_factory=dict)  # acknowledger -> record it acked


@dataclass(frozen=True)
class PodsView:
    evictable: int = 0  # pods a drain must remove (not DaemonSet, not mirror)
    opt_out: bool = False  # a pod carries <domain>/auto-replacement=disabled
    warned_for: tuple[str, ...] = ()  # per drainable pod: the record its <domain>/remediation names
    wait_acks: tuple[tuple[str, str], ...] = ()  # per pod labelled drain-wait=true: ("ns/name", acked record)


@dataclass(frozen=True)
class PoolView:
    name: str
    mode: ConsentMode
    max_concurrent: int = 1
    in_progress: int = 0  # other records of the pool in Draining/Acting/Verifying
    breaker_open: bool = False


@dataclass(frozen=True)
class HistoryView:
    """What earlier records of this node say (only terminal ones)."""

    started_in_window: int = 0  # repairs started within the attempt-budget window
    last_reset_at: datetime | None = None  # completion of the last successful reset
    last_reset_fault: Fault | None = None
    last_reset_approved: bool = False
    last_reset_record: str = ""


@dataclass(frozen=True)
class ProviderBlock:
    """Why no provider can start ``action`` on this node (one of the HOLD_*PROVIDER* reasons)."""

    action: str
    hold: str
    message: str


@dataclass(frozen=True)
class Observation:
    node: NodeView
    fault: Fault | None  # the active fault, None when the node reports none (or its class is off)
    fault_action: str | None  # the pool's action for that fault (providers/actions.py); None = not repaired
    pool: PoolView | None  # None: the node belongs to no GpuNodePool
    pods: PodsView = PodsView()
    history: HistoryView = HistoryView()
    provider: ProviderView = field(default_factory=ProviderView)
    replacement_ready: bool = False
    replacement_node: str = ""  # the new node found for a replacement no provider named (Verifying)
    provider_blocks: tuple[ProviderBlock, ...] = ()  # actions no provider can start here
    # the pool's provider for each action (``ProviderSpec.key()``), which an operation started now is bound to
    provider_specs: tuple[tuple[str, str], ...] = ()
    has_hook: bool = False  # the pool has a pre-drain hook (a Warn that calls it starts it)
    hook_running: bool = False  # the repair's pre-drain hook was started and has not ended yet
    # why ``fault_action`` is not the action the pool chose ("": it is): its provider carries
    # that one out as this one (``Pool.carried_out``)
    fault_action_note: str = ""

    def provider_block(self, action: str) -> ProviderBlock | None:
        return next((b for b in self.provider_blocks if b.action == action), None)

    def provider_spec(self, action: str) -> str:
        return next((spec for a, spec in self.provider_specs if a == action), "")


@dataclass(frozen=True)
class RepairPolicy:
    reset_drain_seconds: float = pool_fields.RESET_DEADLINE_SECONDS.default
    replace_drain_seconds: float = pool_fields.REPLACE_DEADLINE_SECONDS.default
    refault_window_seconds: float = pool_fields.REFAULT_WINDOW_SECONDS.default
    reset_memory_seconds: float = pool_fields.RESET_MEMORY_SECONDS.default
    max_repairs: int = pool_fields.MAX_REPAIRS.default
    verify_timeout_seconds: float = api.VERIFY_TIMEOUT_SECONDS
    operation_timeout_seconds: float = api.OPERATION_TIMEOUT_SECONDS
    poll_seconds: float = api.POLL_SECONDS
    hold_recheck_seconds: float = api.HOLD_RECHECK_SECONDS
    pre_drain_wait_seconds: float = pool_fields.PRE_DRAIN_WAIT_SECONDS.default  # the longest wait after the warning
    acknowledgers: tuple[str, ...] = ()  # node-level preparers the wait is for (e.g. "slurm")
    slinky: bool = False  # the warning also writes Slinky's node-cordon-reason (before the cordon)
    approval_label: str = n.Names().maintenance_approved  # the label the approval message tells users to add

    def drain_seconds(self, action: str) -> float:
        """The drain deadline of ``action``: the one of the pool's deadlines the action table names."""
        return {Deadline.RESET: self.reset_drain_seconds,
                Deadline.REPLACE: self.replace_drain_seconds}[ACTIONS[action].deadline]


# --- actions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Warn:
    """The warning before the drain, to the pods: each pod not yet warned for this record gets
    the warning's annotations (deadline, reason, record) and an event; ``call_hook``: the pool's
    pre-drain hook is called (once per repair: asked while the node does not carry this
    record's warning, see ``_marking``). The node's own copy of the annotations (and Slinky's
    cordon reason when asked) is written by the plan's one ``EnsureMarked``, in the same patch
    as the cordon, before this. Idempotent: what already names this record is left alone."""

    deadline: datetime
    reason: str
    slinky: bool = False
    call_hook: bool = False


@dataclass(frozen=True)
class EnsureMarked:
    """Every write of one plan to the node, in one patch: the maintenance-required label and the
    PreferNoSchedule taint; with ``cordon`` spec.unschedulable; with ``warning`` the warning's
    node annotations; with ``clear_warning`` the warning's annotations and acknowledgements
    removed. Only what is missing is written."""

    cordon: bool = False
    warning: Warn | None = None
    clear_warning: bool = False


@dataclass(frozen=True)
class Unmark:
    """Remove both labels and the taint; uncordon unless someone else had cordoned the node."""

    uncordon: bool = True


@dataclass(frozen=True)
class Drain:
    force: bool = False  # past the deadline: delete what eviction could not remove


@dataclass(frozen=True)
class ClearWarning:
    """Remove the warning's node annotations and the acknowledgements (labels stay)."""


@dataclass(frozen=True)
class DriveProvider:
    operation: Operation


@dataclass(frozen=True)
class Emit:
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Notify:
    message: str


Effect = EnsureMarked | Unmark | Drain | Warn | ClearWarning | DriveProvider | Emit | Notify


@dataclass(frozen=True)
class Decision:
    state: RepairState | None
    actions: tuple[Effect, ...] = ()
    requeue_after: float | None = None


# --- the transition function -----------------------------------------------------------
def transition(state: RepairState | None, obs: Observation, now: datetime, policy: RepairPolicy,
               *, record_name: str = "") -> Decision:
    """Chains single steps while the phase keeps changing on the same observation.

    The chain stops on entering Acting: the provider view observed belongs to the previous
    operation (if any), so the new one is judged on the next reconcile. An escalation (from
    Acting or Verifying) also stops on entering Draining: the node's pods are not observed
    while the provider acts (the reconciler lists them only to decide, hold or drain; the
    ``PodsView`` is empty), so what the replacement's drain must evict is judged on the next
    reconcile, which lists them. (It still passes through Scheduled's guards at once: a
    replacement that goes ahead keeps its pool slot without a gap.)
    """
    actions: list[Effect] = []
    escalating = state is not None and state.phase in (Phase.ACTING, Phase.VERIFYING)
    decision = _step(state, obs, now, policy, record_name)
    actions.extend(decision.actions)
    for _ in range(6):
        prev, cur = state, decision.state
        if cur is None or cur.phase in TERMINAL or cur.phase == Phase.ACTING \
                or (prev is not None and prev.phase == cur.phase) \
                or (escalating and cur.phase == Phase.DRAINING):
            break
        state = cur
        decision = _step(state, obs, now, policy, record_name)
        actions.extend(decision.actions)
    return _after_the_hook(Decision(decision.state, normalise(actions), decision.requeue_after), obs, policy)


def _after_the_hook(d: Decision, o: Observation, p: RepairPolicy) -> Decision:
    """The pre-drain hook ends before anything is evicted or the provider is asked: a plan that
    starts the hook, or one decided while it runs, leaves out its drain and its provider call
    (each asked again on every look of its phase, so nothing is lost) and looks again after a
    poll at the latest; the hook's end requeues the node sooner. The hook runs off the reconcile
    workers and is bounded by its timeout (at most ``PRE_DRAIN_HOOK_TIMEOUT_SECONDS.maximum``),
    so this wait is too."""
    if not (o.hook_running or (o.has_hook and any(isinstance(a, Warn) and a.call_hook for a in d.actions))):
        return d
    kept = tuple(a for a in d.actions if not isinstance(a, Drain | DriveProvider))
    if len(kept) == len(d.actions):
        return d
    wait = p.poll_seconds if d.requeue_after is None else min(d.requeue_after, p.poll_seconds)
    return Decision(d.state, kept, wait)


def normalise(actions: list[Effect] | tuple[Effect, ...]) -> tuple[Effect, ...]:
    """The plan as the actuator carries it out, one effect per thing written: every node write of
    the chained steps (marking, cordon, the warning's node annotations, a warning cleared) becomes
    one ``EnsureMarked`` where the first of them stood; the pods' warning goes out once (calling
    the hook if any step asked); nothing else appears twice. A lone clearing stays a
    ``ClearWarning``."""
    marks = [a for a in actions if isinstance(a, EnsureMarked)]
    warns = [a for a in actions if isinstance(a, Warn)]
    warn = replace(warns[-1], call_hook=any(w.call_hook for w in warns)) if warns else None
    # the node's warning: the pods' one, else one a marking asks for alone (the node keeps it)
    on_node = warn or next((m.warning for m in marks if m.warning is not None), None)
    mark: EnsureMarked | None = None
    if marks or warns:
        mark = EnsureMarked(cordon=any(isinstance(a, EnsureMarked) and a.cordon for a in actions),
                            warning=on_node,
                            clear_warning=on_node is None and any(isinstance(a, ClearWarning) or (
                                isinstance(a, EnsureMarked) and a.clear_warning) for a in actions))
    out: list[Effect] = []
    for a in actions:
        if mark is not None and isinstance(a, EnsureMarked | ClearWarning):
            a = mark
        elif isinstance(a, Warn):
            a = warn  # type: ignore[assignment]
        if a not in out:
            out.append(a)
    return tuple(out)


def _step(s: RepairState | None, o: Observation, now: datetime, p: RepairPolicy, record_name: str) -> Decision:
    if s is None:
        return _decide(o, now, p, record_name)
    if s.phase in TERMINAL:
        return Decision(s)
    handler = {
        Phase.AWAITING_APPROVAL: _awaiting,
        Phase.SCHEDULED: _scheduled,
        Phase.DRAINING: _draining,
        Phase.ACTING: _acting,
        Phase.VERIFYING: _verifying,
        Phase.FAILED: _holding,
        Phase.HUMAN_NEEDED: _holding,
    }[s.phase]
    return handler(s, o, now, p)


def _to(s: RepairState, phase: Phase, now: datetime, message: str, **changes: object) -> RepairState:
    steps = (*s.steps, TimelineStep(phase.value, now, message))[-50:]
    return replace(s, phase=phase, steps=steps, message=message, hold="", **changes)  # type: ignore[arg-type]


def drain_reason(f: Fault, record: str) -> str:
    """The warning's reason: the fault and the record, e.g.
    ``GPU 3 reported Xid 79 (GPU has fallen off the bus) (remediation a100-0-1f2e3d4c)``."""
    what = f.message.strip().rstrip(".") if f.message.strip() else f"{f.reason} {f.code}".strip()
    return f"{what} (remediation {record})"


def pending_acks(s: RepairState, o: Observation, p: RepairPolicy) -> list[str]:
    """Who the pre-drain wait is still for: each listed acknowledger whose node annotation does not
    name this record (an ack of an earlier repair does not count), and each pod labelled
    drain-wait=true whose ack annotation does not name it."""
    acks = [a for a in p.acknowledgers if o.node.drain_acks.get(a) != s.name]
    return [*acks, *(f"pod {pod}" for pod, acked in o.pods.wait_acks if acked != s.name)]


def _decide(o: Observation, now: datetime, p: RepairPolicy, record_name: str) -> Decision:
    """No record yet: report the fault, then choose reset or replace and who decides."""
    if o.fault is None or o.fault_action is None or o.pool is None or o.pool.mode == ConsentMode.OFF:
        return Decision(None)
    f, pool = o.fault, o.pool
    base = RepairState(name=record_name, node=o.node.name, pool=pool.name, consent_mode=pool.mode, fault=f,
                       phase=Phase.SCHEDULED, action=o.fault_action, created=now)
    required = Emit(n.EVENT_REQUIRED, words.required(f, pool.name, pool.mode), warning=True)
    if o.history.started_in_window >= p.max_repairs:
        msg = (f"{o.history.started_in_window} repairs started within the attempt-budget window "
               f"(limit {p.max_repairs}); not repairing again: a human must look at this node")
        s = _to(base, Phase.HUMAN_NEEDED, now, msg, outcome=Outcome.BUDGET_EXHAUSTED.value)
        return Decision(s, (EnsureMarked(), required, Emit(n.EVENT_BUDGET_EXHAUSTED, msg, warning=True),
                            Notify(msg)))
    h = o.history
    since_reset = (now - h.last_reset_at).total_seconds() if h.last_reset_at else None
    if since_reset is not None and h.last_reset_fault is not None and since_reset <= p.refault_window_seconds \
            and h.last_reset_fault.key == f.key:
        again = ACTIONS[o.fault_action].escalates_to or o.fault_action
        msg = (f"{f.key} came back {int(since_reset)}s after the reset of {h.last_reset_record}; "
               f"{ACTIONS[again].doing} under the same approval")
        s = _to(base, Phase.SCHEDULED, now, msg, action=again, escalated=True,
                escalated_from=h.last_reset_record,
                approved=h.last_reset_approved or pool.mode == ConsentMode.AUTO)
        return Decision(s, (EnsureMarked(), required, Emit(n.EVENT_ESCALATED, msg)))
    action, why = o.fault_action, o.fault_action_note
    escalation = ACTIONS[action].escalates_to
    if escalation and since_reset is not None and h.last_reset_fault is not None \
            and since_reset <= p.reset_memory_seconds and h.last_reset_fault.fault_class == f.fault_class:
        action = escalation
        why = (f"The node was reset {int(since_reset)}s ago for a {f.fault_class} fault, "
               f"so it is {ACTIONS[action].past} directly.")
    base = replace(base, action=action)
    if pool.mode == ConsentMode.PROPOSE and not o.node.approved:
        msg = words.awaiting_approval(action, o.node.name, p.approval_label, why)
        s = _to(base, Phase.AWAITING_APPROVAL, now, msg)
        return Decision(s, (EnsureMarked(), required, Emit(n.EVENT_AWAITING_APPROVAL, msg)))
    if pool.mode == ConsentMode.PROPOSE:
        msg = words.approved(action, p.approval_label, by_label=True, why=why)
        s = _to(base, Phase.SCHEDULED, now, msg, approved=True)
        return Decision(s, (EnsureMarked(), required, Emit(n.EVENT_APPROVED, msg)))
    msg = words.scheduled(action, now.strftime('%Y-%m-%dT%H:%M:%SZ'), why)
    s = _to(base, Phase.SCHEDULED, now, msg, approved=o.node.approved)
    return Decision(s, (EnsureMarked(), required, Emit(n.EVENT_SCHEDULED, msg)))


def _cancel_if_gone(s: RepairState, o: Observation, now: datetime) -> Decision | None:
    """Before the repair starts: a cleared fault, a deleted node or mode ``off`` end the record."""
    if not o.node.exists:
        msg = "the node was deleted before the repair started"
        return Decision(_to(s, Phase.CLOSED, now, msg, outcome=Outcome.CANCELLED.value, completed=now))
    if o.fault is None:
        msg = f"{s.fault.key} cleared before the repair started; the node returns to service"
        return Decision(_to(s, Phase.NOT_NEEDED, now, msg, outcome=Outcome.NOT_NEEDED.value, completed=now),
                        (Unmark(uncordon=False), Emit(n.EVENT_FAULT_CLEARED, msg)))
    if o.pool is None or o.pool.mode == ConsentMode.OFF:
        msg = "the pool's consent mode is now off; repair cancelled before it started"
        return Decision(_to(s, Phase.CLOSED, now, msg, outcome=Outcome.CANCELLED.value, completed=now),
                        (Unmark(uncordon=False),))
    return None


def _awaiting(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    gone = _cancel_if_gone(s, o, now)
    if gone:
        return gone
    assert o.pool is not None
    if o.node.approved or o.pool.mode == ConsentMode.AUTO:
        msg = words.approved(s.action, p.approval_label, by_label=o.node.approved)
        return Decision(_to(s, Phase.SCHEDULED, now, msg, approved=o.node.approved),
                        (Emit(n.EVENT_APPROVED, msg),))
    return Decision(s, (EnsureMarked(),))


def _scheduled(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    if not s.started:
        gone = _cancel_if_gone(s, o, now)
        if gone:
            return gone
    assert o.pool is not None or s.started
    hold, why = "", ""
    block = o.provider_block(s.action)
    if block is not None:
        hold, why = block.hold, block.message
    elif ACTIONS[s.action].opt_out_holds and (s.opt_out or o.pods.opt_out) and not (s.approved or o.node.approved):
        hold, why = HOLD_OPT_OUT, ("a pod on the node carries the auto-replacement opt-out label; "
                                   "add the approval label to replace it anyway")
    elif not s.started and o.pool is not None and o.pool.in_progress >= o.pool.max_concurrent:
        hold, why = HOLD_CONCURRENCY, (f"{o.pool.in_progress} repairs already in progress in pool {o.pool.name} "
                                       f"(maxConcurrentRepairs {o.pool.max_concurrent})")
    elif not s.started and o.pool is not None and o.pool.breaker_open and s.consent_mode == ConsentMode.AUTO \
            and not (s.approved or o.node.approved):
        hold, why = HOLD_BREAKER, f"the circuit breaker of pool {o.pool.name} is open: automatic repairs paused"
    if hold:
        actions: tuple[Effect, ...] = (EnsureMarked(),)
        if hold != s.hold:
            actions += (Emit(n.EVENT_BLOCKED, f"{s.action} held: {why}",
                             warning=hold in (HOLD_OPT_OUT, *PROVIDER_HOLDS)),)
        return Decision(replace(s, hold=hold, message=why), actions, p.hold_recheck_seconds)
    deadline = p.drain_seconds(s.action)
    msg = words.started(s.action, deadline, after_failed=ACTIONS.escalated_from(s.action)
                        if s.escalated and s.started else "")
    if s.started and s.pre_drain_deadline is not None:
        # an escalation: the workload was warned and evicted for this record already; no second wait
        started = _to(s, Phase.DRAINING, now, msg, drain_started=now, opt_out=s.opt_out or o.pods.opt_out,
                      eviction_started=now)
        return Decision(started, (EnsureMarked(cordon=True), Emit(n.EVENT_STARTED, msg)), 0)
    # The first drain of the repair, or an escalation whose reset never got its marking (and so
    # its warning) onto the node (``_action_failed``): the warning goes out now, for this attempt,
    # with the wait and the hook. Whether the node was cordoned before the repair was judged when
    # the repair first started (a cordon seen since may be this repair's own).
    wait = min(p.pre_drain_wait_seconds, deadline)
    evict_by = now + timedelta(seconds=wait)
    started = _to(s, Phase.DRAINING, now, msg, drain_started=now, opt_out=s.opt_out or o.pods.opt_out,
                  node_was_cordoned=s.node_was_cordoned if s.started else o.node.unschedulable,
                  pre_drain_deadline=evict_by, eviction_started=None, warning_attempt=s.attempts + 1)
    reason = drain_reason(s.fault, s.name)
    warning = words.drain_warning(s.action, utc_iso(evict_by), wait, reason)
    warn = Warn(evict_by, reason, slinky=p.slinky, call_hook=True)
    return Decision(started, (EnsureMarked(cordon=True, warning=warn), warn,
                              Emit(n.EVENT_STARTED, msg), Emit(n.EVENT_DRAIN_WARNING, warning)), 0)


def _draining(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    if not o.node.exists:
        return _failed(s, now, "the node disappeared while it was being drained")
    if s.eviction_started is None:
        return _pre_drain_wait(s, o, now, p)
    return _evict(s, o, now, p)


def _pre_drain_wait(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    """Warned, nothing evicted yet: wait until everyone asked for has acknowledged or the deadline."""
    evict_by = s.pre_drain_deadline or s.drain_started or now
    pending = pending_acks(s, o, p)
    if pending and now < evict_by:
        written_now = s.drain_started == now  # this reconcile's own Warn: the observation predates it
        # a pod without the warning (one that arrived since) is warned too
        actions = _marking(s, o, p, warn_pods=not written_now and any(w != s.name for w in o.pods.warned_for))
        waiting = words.drain_waiting(utc_iso(evict_by), pending)  # the record shows who holds the drain
        return Decision(s if s.message == waiting else replace(s, message=waiting), actions,
                        min(p.poll_seconds, max((evict_by - now).total_seconds(), 0.0)))
    waited = bool(p.acknowledgers) or bool(o.pods.wait_acks)
    if not waited:  # nobody to wait for: evict at once, no step of its own
        return _evict(replace(s, eviction_started=now), o, now, p)
    if not pending:
        msg = words.drain_wait_acknowledged([*p.acknowledgers, *(f"pod {pod}" for pod, _ in o.pods.wait_acks)])
    else:
        msg = words.drain_wait_deadline(pending)
    decision = _evict(_to(s, Phase.DRAINING, now, msg, eviction_started=now), o, now, p)
    return replace(decision, actions=(Emit(n.EVENT_DRAIN_WAIT_ENDED, msg), *decision.actions))


def _marking(s: RepairState, o: Observation, p: RepairPolicy, *, warn_pods: bool = False) -> tuple[Effect, ...]:
    """What a started repair keeps on the node, asked on every look while it drains and acts:
    the label, the taint, the cordon and, in the attempt the warning went out for, the warning's
    node annotations. Only what is missing is written, so a node that has it all costs no
    request; one whose first patch was refused (or lost to a crash) gets it all again.

    The hook goes with the warning, once: the plan that first asks for them calls it right after
    the patch that puts the warning on the node, so while the node does not carry this record's
    warning (``remediation`` naming it) that plan never got past its write, and the warning goes
    out again (to the pods too) with the hook call it did not make. A node that carries it had
    the call; a restarted controller reads that from the node. Once the provider has the
    operation (Acting, the provider's progress started), the plan that asked it got past the
    marking and the hook: the warning is written again if it went missing, without the call.
    An escalation after a failed reset drains and acts again under the first warning: marking
    and cordon only; unless that warning never went out (``_action_failed``), then the
    escalation's own drain is the one the warning goes with (``warning_attempt``)."""
    if not _warning_due(s):
        return (EnsureMarked(cordon=True),)
    hook = _hook_owed(s, o)
    assert s.pre_drain_deadline is not None
    warn = Warn(s.pre_drain_deadline, drain_reason(s.fault, s.name), slinky=p.slinky, call_hook=hook)
    return (EnsureMarked(cordon=True, warning=warn), warn) if hook or warn_pods \
        else (EnsureMarked(cordon=True, warning=warn),)


def _warning_due(s: RepairState) -> bool:
    """Whether the drain (or operation) in progress is the one the warning went out for."""
    attempt = s.attempts if s.phase == Phase.ACTING else s.attempts + 1
    return s.pre_drain_deadline is not None and attempt == s.warning_attempt


def _hook_owed(s: RepairState, o: Observation) -> bool:
    """Whether the plan that calls the hook has not been carried out yet (``_marking``): the node
    lacks this record's warning, and the provider has not started the operation, or cannot be
    asked whether it did (``_provider_gone``)."""
    return _warning_due(s) and o.node.warned_for != s.name \
        and (s.phase != Phase.ACTING or o.provider.state == ProviderState.NOT_STARTED or _provider_gone(s, o))


def _provider_gone(s: RepairState, o: Observation) -> bool:
    """The operation's provider was taken from the pool (or its settings broke) mid-operation:
    the reconciler reports the operation failed with the pool's reason, and whether the provider
    was ever asked is unknown. Without this record's warning on the node, the marking that
    comes before the provider's call may never have got through: warning again costs a second
    notice, not warning could replace a node under a workload that was never told. A provider
    that refuses the node is still there and still asked."""
    block = o.provider_block(s.operation.action) if s.operation is not None else None
    return block is not None and block.hold != HOLD_PROVIDER_REFUSED


def _evict(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    marking = _marking(s, o, p)
    if o.pods.evictable == 0:
        op = Operation(id=f"{s.name}-{s.attempts + 1}", action=s.action, started=now, boot_id_before=o.node.boot_id,
                       provider=o.provider_spec(s.action))
        msg = f"drained; {s.action} requested from the provider (operation {op.id})"
        return Decision(_to(s, Phase.ACTING, now, msg, operation=op, attempts=s.attempts + 1),
                        (*marking, DriveProvider(op)), p.poll_seconds)
    deadline = p.drain_seconds(s.action)
    assert s.drain_started is not None
    force = now >= s.drain_started + timedelta(seconds=deadline)
    return Decision(s, (*marking, Drain(force=force)), p.poll_seconds)


def _acting(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    op = s.operation
    assert op is not None
    if o.provider.state == ProviderState.SUCCEEDED:
        msg = f"{op.action} done by the provider; verifying the node"
        if ACTIONS[op.action].proof == Proof.REPLACED:
            new = o.provider.new_node or op.new_node
            msg = f"node replaced by {new}; waiting for it to become Ready"
            return Decision(_to(s, Phase.VERIFYING, now, msg, verify_started=now, replacement_node=new),
                            (), p.poll_seconds)
        return Decision(_to(s, Phase.VERIFYING, now, msg, verify_started=now), (), p.poll_seconds)
    if o.provider.state == ProviderState.FAILED:
        return _action_failed(s, o, now, p, f"the provider reported: {o.provider.message or 'failed'}")
    deadline = op.started + timedelta(seconds=p.operation_timeout_seconds)
    if now >= deadline:
        return _action_failed(s, o, now, p, f"the provider did not finish within {int(p.operation_timeout_seconds)}s")
    # a provider whose progress shows on the node is looked at again when the node changes (or
    # when it expects progress, or at the timeout); any other is polled
    longest = (deadline - now).total_seconds() if o.provider.shows_on_node else p.poll_seconds
    wait = longest if o.provider.next_check is None else min(longest, max(o.provider.next_check, 0.0))
    return Decision(s, (*_marking(s, o, p), DriveProvider(op)), wait)  # marked first: never acts on an unmarked node


def _verifying(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    op = s.operation
    assert op is not None and s.verify_started is not None
    proof = ACTIONS[op.action].proof
    if proof == Proof.REPLACED:
        if o.replacement_ready:
            new = s.replacement_node or o.replacement_node
            msg = words.replace_succeeded(new, s.pool)
            return Decision(_to(s, Phase.SUCCEEDED, now, msg, outcome=Outcome.SUCCEEDED.value, completed=now,
                                replacement_node=new), (ClearWarning(), Emit(n.EVENT_SUCCEEDED, msg)))
    elif o.node.exists and o.node.ready and o.fault is None and (
            proof != Proof.REBOOTED or o.node.boot_id != op.boot_id_before):
        msg = words.succeeded_in_place(op.action, s.fault.fault_class, rebooted=proof == Proof.REBOOTED)
        return Decision(_to(s, Phase.SUCCEEDED, now, msg, outcome=Outcome.SUCCEEDED.value, completed=now),
                        (Unmark(uncordon=not s.node_was_cordoned), Emit(n.EVENT_SUCCEEDED, msg)))
    deadline = s.verify_started + timedelta(seconds=p.verify_timeout_seconds)
    if now >= deadline:
        what = "the new node did not become Ready" if proof == Proof.REPLACED else (
            "the node did not come back Ready and free of the fault")
        return _action_failed(s, o, now, p, f"{what} within {int(p.verify_timeout_seconds)}s")
    # Not verified yet: the node takes no work, so a marking or cordon someone removed meanwhile
    # (or a reset that re-registered the node without them) is put back; nothing is written to a
    # node that carries them (or that is gone: a replaced one). The warning stays as it is.
    marked = (EnsureMarked(cordon=True),)
    if proof == Proof.REPLACED:
        return Decision(s, marked, p.poll_seconds)  # the new node is another key: polled
    # A reset is verified on the node alone (Ready, boot id, fault condition, its marking), and
    # each change of it starts a look: no poll, only the timeout's own.
    return Decision(s, marked, (deadline - now).total_seconds())


def _action_failed(s: RepairState, o: Observation, now: datetime, p: RepairPolicy, why: str) -> Decision:
    """A failed reset escalates to a replacement under the same approval; a failed replacement holds.

    A reset whose operation timed out while the hook was still owed (``_hook_owed``: its marking,
    and with it the warning, never reached the node, so the provider was never asked) warned
    nobody: the replacement drains as a first drain does, with the warning, the wait and the
    hook (``_scheduled``; the record's ``preDrainDeadline`` is cleared until then). So does one
    whose provider was taken from the pool mid-operation while the node lacked the warning
    (``_provider_gone``: nobody can say the provider was asked)."""
    escalation = ACTIONS[s.action].escalates_to
    if escalation:
        failed = f"{s.action} failed: {why}"
        msg = f"{failed}; escalating to a {ACTIONS[escalation].short} under the same approval"
        unwarned = s.phase == Phase.ACTING and _hook_owed(s, o)
        if unwarned:
            msg += f"; the node never got the warning, so the {ACTIONS[escalation].short} warns its workloads first"
        esc = _to(s, Phase.SCHEDULED, now, msg, action=escalation, escalated=True, operation=None,
                  verify_started=None, approved=s.approved,
                  pre_drain_deadline=None if unwarned else s.pre_drain_deadline)
        return Decision(esc, (Emit(n.EVENT_FAILED, words.action_failed(s.action, why), warning=True),
                              Emit(n.EVENT_ESCALATED, words.escalated_after_failure(s.action, escalation, why))), 0)
    return _failed(s, now, f"{s.action} failed: {why}")


def _failed(s: RepairState, now: datetime, msg: str) -> Decision:
    msg = f"{msg}; labels and condition stay on the node for a human"
    return Decision(_to(s, Phase.FAILED, now, msg, outcome=Outcome.FAILED.value, completed=now),
                    (EnsureMarked(clear_warning=True), Emit(n.EVENT_FAILED, msg, warning=True), Notify(msg)))


def _holding(s: RepairState, o: Observation, now: datetime, p: RepairPolicy) -> Decision:
    """Failed / HumanNeeded: keep the node marked, and without the warning, until its fault clears
    (or it is gone). Marked and cleared as ``_failed`` left it, so a write of that step that
    failed is made again here (nothing is written when the node already is)."""
    if not o.node.exists or o.fault is None:
        why = "the node is gone" if not o.node.exists else f"{s.fault.key} cleared"
        msg = f"{why}; closing the record (outcome {s.outcome})"
        actions: tuple[Effect, ...] = ()
        if o.node.exists:
            actions = (Unmark(uncordon=s.started and not s.node_was_cordoned), Emit(n.EVENT_FAULT_CLEARED, msg))
        return Decision(_to(s, Phase.CLOSED, now, msg, completed=s.completed or now), actions)
    return Decision(s, (EnsureMarked(clear_warning=True),))
