"""What the Slurm bridge does for one node, decided without I/O.

``decide(observation, memory, policy)`` returns the actions for one look at a node; the
bridge (``slurm/bridge.py``) carries them out and records in ``memory`` what it did. Read
it in this order:

1. The node is being repaired (the controller's warning is on it: ``drain-deadline``,
   ``drain-reason``, ``remediation``):
   drain the Slurm node with reason ``autoclusters: <drain-reason>`` (a drain someone else
   set is left as it is, reason included); send the pool's signal to each job on the node;
   requeue each signalled job once its lead time has passed, or at once when it ended by
   itself without completing (it saved its checkpoint and exited), or when the deadline
   came; when the Slurm node is DRAINED (drain flag, nothing allocated or completing) and
   every signalled job is settled, acknowledge: ``drain-ack-slurm`` = the record's name.
2. The node is not being repaired: resume the Slurm node only when its drain is ours
   (reason prefix ``autoclusters:``) and the node no longer carries the
   ``maintenance-required`` label; a drain set by an admin or a HealthCheckProgram is
   reported once (event) and never cleared. With ``actOnExternalDrains`` the Kubernetes node
   is cordoned while such a drain lasts (and uncordoned after, if we cordoned it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from autoclusters.clock import parse_iso, utc_iso
from autoclusters.names import DRAIN_REASON_PREFIX
from autoclusters.pools.slurm_policy import SlurmPolicy
from autoclusters.slurm.commands import SlurmJob, SlurmNode

# Event reasons on the Kubernetes node (one place, so docs and tests use the same words).
EVENT_DRAINED = "SlurmNodeDrain"
EVENT_SIGNALLED = "SlurmJobSignalled"
EVENT_REQUEUED = "SlurmJobRequeued"
EVENT_READY = "SlurmNodeDrained"
EVENT_RESUMED = "SlurmNodeResumed"
EVENT_EXTERNAL = "SlurmNodeDrainedExternally"
EVENT_NOT_FOUND = "SlurmNodeNotFound"
EVENT_NOT_REQUEUEABLE = "SlurmJobNotRequeueable"
EVENT_DEADLINE = "SlurmDrainDeadlinePassed"
EVENT_FAILED = "SlurmCommandFailed"
# A drain warning on the node that no active Remediation record of that node backs (anyone who
# may patch the node can write the annotations): the bridge drains nothing for it.
EVENT_UNBACKED = "SlurmDrainWarningIgnored"


def slurm_reason(drain_reason: str) -> str:
    return f"{DRAIN_REASON_PREFIX} {drain_reason}".strip()


def ours(node: SlurmNode) -> bool:
    return node.reason.startswith(DRAIN_REASON_PREFIX)


@dataclass(frozen=True)
class Repair:
    """The controller's warning on the node (the pre-drain contract)."""

    record: str
    reason: str
    deadline: datetime


@dataclass(frozen=True)
class SlurmObservation:
    node: str  # the Kubernetes node
    slurm_name: str
    now: datetime
    repair: Repair | None
    maintenance_required: bool
    ack: str  # the current value of drain-ack-slurm ("" when absent)
    cordoned: bool
    cordoned_by_us: bool
    slurm: SlurmNode | None  # None: Slurm does not know this node
    external_note: str = ""  # the node's slurm-external-drain annotation ("" when absent)
    jobs_on_node: tuple[SlurmJob, ...] = ()
    signalled_jobs: dict[str, SlurmJob] = field(default_factory=dict)  # what Slurm says of the jobs we signalled


@dataclass
class Memory:
    """What the bridge did for one node during the current repair."""

    record: str = ""
    signalled: dict[str, datetime] = field(default_factory=dict)  # job id -> when
    restarts_at_signal: dict[str, int] = field(default_factory=dict)
    requeued: set[str] = field(default_factory=set)
    reported: set[str] = field(default_factory=set)  # event keys already sent (one event per episode)


    def to_json(self) -> str:
        return json.dumps({"record": self.record, "requeued": sorted(self.requeued),
                           "signalled": {j: {"at": utc_iso(t), "restarts": self.restarts_at_signal.get(j, 0)}
                                         for j, t in sorted(self.signalled.items())}}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Memory | None:
        """The memory a bridge wrote on the node; None when absent or unreadable."""
        try:
            raw = json.loads(text)
            signalled = {str(j): (parse_iso(v["at"]), int(v.get("restarts", 0)))
                         for j, v in dict(raw.get("signalled") or {}).items()}
            return cls(record=str(raw["record"]), signalled={j: t for j, (t, _) in signalled.items() if t},
                       restarts_at_signal={j: r for j, (_, r) in signalled.items()},
                       requeued={str(j) for j in raw.get("requeued") or []})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


# --- actions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmDrain:
    """Drain the node in Slurm with this reason."""

    reason: str


@dataclass(frozen=True)
class Signal:
    job: SlurmJob
    signal: str  # "" = none: only start the lead time


@dataclass(frozen=True)
class Requeue:
    job_id: str
    why: str


@dataclass(frozen=True)
class Ack:
    record: str


@dataclass(frozen=True)
class Resume:
    reason: str  # the drain reason being cleared


@dataclass(frozen=True)
class Report:
    key: str  # once per key per episode
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class KubeCordon:
    """Cordon or uncordon the node in Kubernetes."""

    cordon: bool  # True: cordon (and mark as ours); False: uncordon (only ours)


@dataclass(frozen=True)
class Note:
    """Set (or, with "", remove) the node's slurm-external-drain annotation, which
    ``autoclusters status`` lists."""

    text: str


@dataclass(frozen=True)
class Forget:
    """The repair ended: drop the memory of it."""


SlurmEffect = SlurmDrain | Signal | Requeue | Ack | Resume | Report | KubeCordon | Note | Forget


def decide(obs: SlurmObservation, mem: Memory, policy: SlurmPolicy) -> list[SlurmEffect]:
    if obs.repair is not None:
        return _during_repair(obs, obs.repair, mem, policy)
    out: list[SlurmEffect] = [Forget()] if mem.record else []
    return out + _outside_repair(obs, mem, policy)


def _during_repair(obs: SlurmObservation, repair: Repair, mem: Memory, policy: SlurmPolicy) -> list[SlurmEffect]:
    # The bridge starts a new Memory for each record, so what it holds is this repair's.
    reported, signalled, requeued = mem.reported, mem.signalled, mem.requeued
    acked = obs.ack == repair.record
    node = obs.slurm
    if node is None:
        out: list[SlurmEffect | None] = [_once(reported, Report(f"missing:{repair.record}", EVENT_NOT_FOUND,
                                                    f"Slurm has no node {obs.slurm_name!r}: nothing to drain",
                                                    warning=True))]
        return _clean([*out, None if acked else Ack(repair.record)])
    want = slurm_reason(repair.reason)
    out = []
    if not node.drain or (ours(node) and node.reason != want):
        out.append(SlurmDrain(want))
    elif not ours(node):
        out.append(_once(reported, Report(f"external:{node.reason}", EVENT_EXTERNAL,
                                          f"Slurm node {node.name} was already drained by someone else "
                                          f"({node.reason!r}); left as it is")))
    past_deadline = obs.now >= repair.deadline
    for running in obs.jobs_on_node:
        if running.job_id not in signalled and running.state != "COMPLETING":
            out.append(Signal(running, policy.signal))
    settled = True
    for job_id, when in signalled.items():
        if job_id in requeued:
            continue
        job = obs.signalled_jobs.get(job_id)
        if job is None or job.state == "COMPLETED" or job.pending or (
                job.restarts > mem.restarts_at_signal.get(job_id, job.restarts)):
            continue  # gone from Slurm's memory, finished its work, or already requeued
        if not policy.requeue:
            settled = settled and not job.active
            continue
        if not job.requeue:
            out.append(_once(reported, Report(f"norequeue:{job_id}", EVENT_NOT_REQUEUEABLE,
                                              f"job {job_id} on Slurm node {node.name} cannot be requeued "
                                              "(submitted with --no-requeue); it ends with the repair",
                                              warning=True)))
            settled = settled and not job.active
            continue
        lead_over = (obs.now - when).total_seconds() >= policy.signal_lead_seconds
        if not job.active:
            out.append(Requeue(job_id, f"it ended ({job.state}) after the signal"))
        elif lead_over:
            out.append(Requeue(job_id, f"{policy.signal_lead_seconds}s after the signal"))
        elif past_deadline:
            out.append(Requeue(job_id, "the drain deadline came"))
        settled = False
    acting = any(isinstance(a, SlurmDrain | Signal | Requeue) for a in out)
    if node.drained and settled and not acting and not acked:
        out.append(Ack(repair.record))
    if past_deadline and not node.drained:
        out.append(_once(reported, Report(f"deadline:{repair.record}", EVENT_DEADLINE,
                                          f"Slurm node {node.name} is still {node.describe()} at the drain "
                                          "deadline; the repair goes on without the Slurm acknowledgement",
                                          warning=True)))
    return _clean(out)


def external_note(node: SlurmNode) -> str:
    who = f" by {node.reason_user}" if node.reason_user else ""
    when = f" at {node.reason_time}" if node.reason_time else ""
    return f"{node.reason}{who}{when}" if who or when else node.reason


def _outside_repair(obs: SlurmObservation, mem: Memory, policy: SlurmPolicy) -> list[SlurmEffect]:
    node = obs.slurm
    out: list[SlurmEffect | None] = []
    external = node is not None and node.drain and not ours(node)
    note = external_note(node) if external and node is not None else ""
    if note != obs.external_note:
        out.append(Note(note))
    if node is not None and node.drain and ours(node) and not obs.maintenance_required:
        out.append(Resume(node.reason))
    if external and node is not None:
        who = f" by {node.reason_user}" if node.reason_user else ""
        when = f" at {node.reason_time}" if node.reason_time else ""
        out.append(_once(mem.reported, Report(f"external:{node.reason}", EVENT_EXTERNAL,
                                              f"Slurm node {node.name} is drained{who}{when}: {node.reason!r}; "
                                              + ("cordoning the node (actOnExternalDrains)"
                                                 if policy.act_on_external_drains else "not acted on"))))
        if policy.act_on_external_drains and not obs.cordoned:
            out.append(KubeCordon(True))
    elif obs.cordoned_by_us and obs.cordoned:
        out.append(KubeCordon(False))
    return _clean(out)


def _once(reported: set[str], report: Report) -> Report | None:
    return None if report.key in reported else report


def _clean(actions: list[SlurmEffect | None]) -> list[SlurmEffect]:
    return [a for a in actions if a is not None]
