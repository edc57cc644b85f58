"""Removal: every mark autoclusters put on nodes and pods taken off, once nothing writes them back.

What autoclusters writes on a node (``names.py``, and the code that writes it):

- labels ``<domain>/maintenance-required`` and ``<domain>/maintenance-approved``, and the taint
  ``<domain>/maintenance-required`` (``controller/actuator.py``);
- the cordon (``spec.unschedulable``) of a repair's drain, and of the Slurm bridge for an
  external Slurm drain (``<domain>/slurm-cordoned`` says so);
- annotations: the drain warning (``drain-deadline``, ``drain-reason``, ``remediation``), the
  acknowledgements (``drain-ack-<name>``), Slinky's cordon reason when it is ours (it starts
  ``autoclusters:``), Karpenter's ``do-not-disrupt`` / ``do-not-repair`` where the marker
  ``<domain>/added-karpenter-guards`` says we added them (a user's own stay), the marker itself,
  ``<domain>/marked-at``, the replacement claim (``<group>/operation``) and the Slurm bridge's
  (``slurm-jobs``, ``slurm-external-drain``, ``slurm-cordoned``);
- the detector's conditions (``<prefix>GPUFault``, ``<prefix>InterconnectFault``,
  ``GPUHealthDetectorDegraded``) in ``nodes/status``;
- on pods: the drain warning's three annotations and the pod's acknowledgement (``drain-ack``).

A cordon is taken back only where autoclusters says it cordoned: the node's latest Remediation
record started a drain and found the node schedulable (``nodeWasCordoned`` false), or the Slurm
bridge's annotation says it cordoned. An operator's cordon is never lifted.

A node in mid-repair is decided by its record's phase: awaiting approval or scheduled (nothing
has touched the node's work yet) and draining (evictions are single API calls; evicted pods are
already rescheduled by their owners) are undone in full. Acting or verifying: a reset that is
over (the node Ready with another boot id than before the reset) is undone in full; one that
may still be under way (a reboot Job, or a provider call, whose reboot may come) and a
replacement under way (the provider removes the node) leave the node cordoned, since work
scheduled there now would be cut off by the reboot or the removal. A holding record (Failed,
HumanNeeded: the fault is not repaired) leaves the cordon too. Each such cordon is reported as
a ``Leftover`` with why and the command that removes it; the caller exits non-zero.

Ordering: the controller, the detector and the admission that guards the maintenance labels
must be gone first, or the marks come back (or their removal is refused: only the controller
may remove ``maintenance-required``). ``running_parts`` names what still runs, from the cluster
itself: their pods, a controller Lease held and renewed within its duration (a controller run
as a process has no pod), the label policy's binding and the webhook configuration.
``uninstall`` refuses while any is there; ``stop_parts`` deletes them first when asked.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from autoclusters import names as n
from autoclusters.api import HOLDING, TERMINAL, Phase
from autoclusters.clock import Clock, SystemClock, parse_iso
from autoclusters.controller.remediation_record import phase_of
from autoclusters.controller.shards import layout_of
from autoclusters.deploy import stack, workloads
from autoclusters.deploy.controller import LEASE_NAME
from autoclusters.kube import Conflict, Invalid, Kube, NotFound
from autoclusters.kube.client import JSON_PATCH
from autoclusters.kube.errors import lost_race
from autoclusters.kube.json_patch import pointer
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.ops import resources as res
from autoclusters.providers.actions import ACTIONS, Proof
from autoclusters.providers.hostreboot import boot_id, job_name_for
from autoclusters.providers.registry import node_guards

JSON = dict[str, Any]

# The components whose pods write marks (the controller's shards share its name label).
WRITERS = (workloads.CONTROLLER, workloads.DETECTOR)


@dataclass(frozen=True)
class Leftover:
    """Something the cleanup did not remove, why, and the command that removes it."""

    node: str
    what: str
    why: str
    command: str

    def line(self) -> str:
        return f"LEFT node {self.node}: {self.what}: {self.why}; to remove it: {self.command}"


@dataclass
class NodeCleanup:
    node: str
    removed: list[str] = field(default_factory=list)
    left: list[Leftover] = field(default_factory=list)


@dataclass
class Report:
    nodes: list[NodeCleanup] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)  # "ns/name: annotation, ..."
    dry_run: bool = False

    @property
    def left(self) -> list[Leftover]:
        return [x for c in self.nodes for x in c.left]

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        out = [f"node {c.node}: {verb} {', '.join(c.removed)}" for c in self.nodes if c.removed]
        out += [f"pod {p}" for p in self.pods]
        out += [x.line() for x in self.left]
        return out

    def to_dict(self) -> JSON:
        return {"dryRun": self.dry_run,
                "nodes": [{"node": c.node, "removed": c.removed,
                           "left": [{"what": x.what, "why": x.why, "command": x.command} for x in c.left]}
                          for c in self.nodes if c.removed or c.left],
                "pods": self.pods}


class StillRunning(RuntimeError):
    """A part that writes marks (or refuses their removal) is still there."""

    def __init__(self, parts: list[str]) -> None:
        super().__init__("autoclusters is still running, and would write the marks back or refuse their removal: "
                         + "; ".join(parts))
        self.parts = parts


# --- what marks a node carries, and what to do about them --------------------------------------
def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def node_annotations_ours(names: Names, annotations: dict[str, Any]) -> list[str]:
    """The node annotations of ours among ``annotations``, sorted."""
    fixed = {*names.warning_annotations, names.marked_at_annotation, names.karpenter_guard_marker,
             names.operation_annotation, names.slurm_jobs, names.slurm_external_drain, names.slurm_cordoned,
             names.redfish_reset_annotation}  # not redfish_system_annotation: the operator's BMC address
    guarded = {k for g in node_guards() for k in g.annotations}  # the providers' node guards (Karpenter's)
    guards = {k for k in str(annotations.get(names.karpenter_guard_marker, "")).split(",") if k in guarded}
    return sorted(k for k, v in annotations.items()
                  if k in fixed or k in guards or k.startswith(names.drain_ack_prefix)
                  or (k == n.SLINKY_CORDON_REASON and str(v).startswith(n.DRAIN_REASON_PREFIX)))


def pod_annotations_ours(names: Names, annotations: dict[str, Any]) -> list[str]:
    return sorted(k for k in annotations if k in {*names.warning_annotations, names.pod_drain_ack})


def condition_types_ours(names: Names) -> tuple[str, ...]:
    return (*names.fault_conditions, names.detector_health_condition)


def marks_of(names: Names, node: JSON) -> list[str]:
    """Every mark of ours on ``node``, cordon aside (whose it is takes the records to say)."""
    meta = _meta(node)
    found = [f"label {k}" for k in (names.maintenance_required, names.maintenance_approved)
             if k in (meta.get("labels") or {})]
    found += [f"taint {t['key']}" for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") == names.taint_key]
    found += [f"annotation {k}" for k in node_annotations_ours(names, meta.get("annotations") or {})]
    return found + [f"condition {c['type']}" for c in (node.get("status") or {}).get("conditions") or []
                    if c.get("type") in condition_types_ours(names)]


def _created(record: JSON) -> datetime:
    status = record.get("status") or {}
    for value in (status.get("created"), _meta(record).get("creationTimestamp")):
        if isinstance(value, str):
            try:
                parsed = parse_iso(value)
            except ValueError:
                continue
            if parsed is not None:
                return parsed
    return datetime.min.replace(tzinfo=UTC)


def latest_record(records: Iterable[JSON], node: str) -> JSON | None:
    """The node's newest Remediation record (by its creation), or None."""
    mine = [r for r in records if (r.get("spec") or {}).get("node") == node]
    return max(mine, key=lambda r: (_created(r), _meta(r).get("name", ""))) if mine else None


def _drain_started(record: JSON) -> bool:
    status = record.get("status") or {}
    return bool(status.get("drainStarted")) or int(status.get("attempts") or 0) > 0


@dataclass(frozen=True)
class CordonVerdict:
    uncordon: bool
    leftover: Leftover | None = None
    why: str = ""  # whose cordon it is, for the report


def cordon_verdict(node: JSON, record: JSON | None, names: Names, namespace: str) -> CordonVerdict:
    """Whether the node's cordon goes (ours and safe), stays (someone else's: no leftover) or
    stays as a leftover (ours, but unsafe to lift now)."""
    name = _meta(node).get("name", "")
    if not (node.get("spec") or {}).get("unschedulable"):
        return CordonVerdict(False)
    annotations = _meta(node).get("annotations") or {}
    labels = _meta(node).get("labels") or {}
    ours_by_repair = False
    phase = phase_of(record) if record is not None else None
    if record is not None and _drain_started(record) and not (record.get("status") or {}).get("nodeWasCordoned"):
        # An open record cordoned it; a closed one only while its marks are still on the node
        # (its unmark did not finish: the actuator's own rule, the cordon goes with the marks).
        marked = names.maintenance_required in labels or any(
            t.get("key") == names.taint_key for t in (node.get("spec") or {}).get("taints") or [])
        ours_by_repair = phase not in TERMINAL or marked
    if not ours_by_repair:
        if names.slurm_cordoned in annotations:
            return CordonVerdict(True, why="the Slurm bridge cordoned it")
        return CordonVerdict(False)
    assert record is not None
    status = record.get("status") or {}
    rec = _meta(record).get("name", "")
    uncordon = f"kubectl uncordon {name}"
    if phase in HOLDING:
        return CordonVerdict(False, Leftover(
            name, "the cordon", f"its repair (Remediation {rec}, phase {phase}) did not repair its fault, so work "
            "placed there now would meet the faulty GPU", f"{uncordon} once the node is repaired"))
    if phase in (Phase.ACTING, Phase.VERIFYING):
        op = status.get("operation") or {}
        action = str(op.get("action") or status.get("action") or "")
        if action in ACTIONS and ACTIONS[action].proof == Proof.REPLACED:  # the node goes (the action table)
            return CordonVerdict(False, Leftover(
                name, "the cordon", f"its replacement (Remediation {rec}, operation {op.get('id', '?')}) is under "
                "way and the provider removes the node", f"{uncordon} if the node is to stay"))
        before = str(op.get("bootIdBefore") or "")
        if before and node_ready(node) and boot_id(node) not in ("", before):
            return CordonVerdict(True, why=f"Remediation {rec}'s reset is over (new boot id)")
        job = f"{namespace}/{job_name_for(str(op['id']))}" if op.get("id") else ""
        return CordonVerdict(False, Leftover(
            name, "the cordon", f"its reset (Remediation {rec}, operation {op.get('id', '?')}; a host-reboot provider "
            f"runs it as Job {job}) may still reboot the host, cutting off work placed there",
            f"{uncordon} once the node is Ready again after its reboot"))
    return CordonVerdict(True, why=f"Remediation {rec} cordoned it")


@dataclass
class NodePlan:
    """The writes that clean one node: a JSON patch of the node and one of its status."""

    node: str
    ops: list[JSON] = field(default_factory=list)
    status_ops: list[JSON] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    left: list[Leftover] = field(default_factory=list)


def plan_node(node: JSON, record: JSON | None, names: Names, namespace: str) -> NodePlan:
    """What to remove from ``node`` (pure): each removal ``test``s the value it removes, so a
    concurrent writer's change fails the patch instead of being lost."""
    meta = _meta(node)
    plan = NodePlan(meta.get("name", ""))
    labels = meta.get("labels") or {}
    label_keys = [k for k in (names.maintenance_required, names.maintenance_approved) if k in labels]
    if label_keys:
        plan.ops.append({"op": "test", "path": "/metadata/labels", "value": labels})
        plan.ops += [{"op": "remove", "path": f"/metadata/labels/{pointer(k)}"} for k in label_keys]
        plan.removed += [f"label {k}" for k in label_keys]
    taints = (node.get("spec") or {}).get("taints") or []
    ours = [i for i, t in enumerate(taints) if t.get("key") == names.taint_key]
    if ours:
        plan.ops.append({"op": "test", "path": "/spec/taints", "value": taints})
        plan.ops += [{"op": "remove", "path": f"/spec/taints/{i}"} for i in reversed(ours)]
        plan.removed += [f"taint {taints[i]['key']}:{taints[i].get('effect', '')}" for i in ours]
    annotations = meta.get("annotations") or {}
    keys = node_annotations_ours(names, annotations)
    if keys:
        plan.ops.append({"op": "test", "path": "/metadata/annotations", "value": annotations})
        plan.ops += [{"op": "remove", "path": f"/metadata/annotations/{pointer(k)}"} for k in keys]
        plan.removed += [f"annotation {k}" for k in keys]
    verdict = cordon_verdict(node, record, names, namespace)
    if verdict.uncordon:
        plan.ops += [{"op": "test", "path": "/spec/unschedulable", "value": True},
                     {"op": "remove", "path": "/spec/unschedulable"}]
        plan.removed.append(f"cordon ({verdict.why})")
    if verdict.leftover is not None:
        plan.left.append(verdict.leftover)
    conditions = (node.get("status") or {}).get("conditions") or []
    theirs = [i for i, c in enumerate(conditions) if c.get("type") in condition_types_ours(names)]
    if theirs:
        plan.status_ops.append({"op": "test", "path": "/status/conditions", "value": conditions})
        plan.status_ops += [{"op": "remove", "path": f"/status/conditions/{i}"} for i in reversed(theirs)]
        plan.removed += [f"condition {conditions[i]['type']}={conditions[i].get('status', '')}" for i in theirs]
    return plan


# --- ordering: nothing may write the marks back --------------------------------------------------
def _lease_live(lease: JSON, now: datetime) -> bool:
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity") or not isinstance(spec.get("renewTime"), str):
        return False
    try:
        renewed = parse_iso(spec["renewTime"])
    except ValueError:
        return False
    return renewed is not None and renewed + timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0)) > now


def running_parts(kube: Kube, namespace: str, now: datetime) -> list[str]:
    """What still writes marks or guards the labels, each with the command that removes it."""
    found: list[str] = []
    for component in WRITERS:
        pods = kube.list_items(f"/api/v1/namespaces/{namespace}/pods",
                               label_selector=f"app.kubernetes.io/name={component}")
        if pods:
            found.append(f"{len(pods)} pod(s) of {component} in namespace {namespace} "
                         f"(kubectl -n {namespace} delete deployment,daemonset -l app.kubernetes.io/name={component})")
    try:
        leases = kube.list_items(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
    except NotFound:
        leases = []
    for lease in leases:
        name = _meta(lease).get("name", "")
        if layout_of(name, LEASE_NAME) is not None and _lease_live(lease, now):
            found.append(f"a controller holds Lease {namespace}/{name} (holder "
                         f"{(lease.get('spec') or {}).get('holderIdentity')}): stop it")
    for plural, what, name in _admission(namespace):
        try:
            kube.get(f"{ADMISSION}/{plural}/{name}")
        except NotFound:
            continue
        found.append(f"{what} {name} (only the controller may remove the maintenance label while it is there: "
                     f"kubectl delete {what.lower()} {name})")
    return found


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _admission(namespace: str) -> tuple[tuple[str, str, str], ...]:
    """The label admission's objects that refuse the label's removal: (plural, kind, name)."""
    return (("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", stack.policy_name(namespace)),
            ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", stack.webhook_config_name(namespace)))


def stop_parts(kube: Kube, namespace: str) -> list[str]:
    """Deletes the controller's Deployments, the detector's DaemonSet and the label admission
    (its policy binding and webhook configuration); returns what it deleted."""
    deleted: list[str] = []
    body = {"propagationPolicy": "Foreground"}
    for kind, plural in (("deployment", "deployments"), ("daemonset", "daemonsets")):
        for component in WRITERS:
            path = f"/apis/apps/v1/namespaces/{namespace}/{plural}"
            for obj in kube.list_items(path, label_selector=f"app.kubernetes.io/name={component}"):
                name = _meta(obj)["name"]
                try:
                    kube.delete(f"{path}/{name}", body)
                    deleted.append(f"{kind} {namespace}/{name}")
                except NotFound:
                    pass
    for plural, what, name in _admission(namespace):
        try:
            kube.delete(f"{ADMISSION}/{plural}/{name}")
            deleted.append(f"{what} {name}")
        except NotFound:
            pass
    return deleted


def wait_stopped(kube: Kube, namespace: str, clock: Clock, timeout: float,
                 sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Waits up to ``timeout`` seconds for ``running_parts`` to be empty; returns what still runs."""
    end = clock.monotonic() + timeout
    while True:
        parts = running_parts(kube, namespace, clock.now())
        if not parts or clock.monotonic() >= end:
            return parts
        sleep(1.0)


# --- the cleanup ---------------------------------------------------------------------------------
def _patch_fresh(kube: Kube, name: str, plan_for: Callable[[JSON], list[JSON]], status: bool) -> bool:
    """Applies ``plan_for(node)`` to the node (or its status) read anew after a lost race."""
    path = f"/api/v1/nodes/{name}" + ("/status" if status else "")
    for _ in range(5):
        try:  # the node is read anew each time; one deleted meanwhile has nothing left to clean
            ops = plan_for(kube.get(f"/api/v1/nodes/{name}"))
            if not ops:
                return False
            kube.patch(path, ops, JSON_PATCH)
            return True
        except NotFound:
            return False
        except (Conflict, Invalid) as e:  # a failed `test` answers 422, a stale object 409
            if not lost_race(e):
                raise  # an admission policy's refusal: reading again cannot help
    raise Conflict(f"cleaning node {name}: still losing to concurrent writers")


def clean(kube: Kube, names: Names, namespace: str, *, dry_run: bool = False) -> Report:
    """Removes every mark of ours from every node and pod (``dry_run``: only says what it would)."""
    report = Report(dry_run=dry_run)
    records = res.list_remediations(kube, names) or []
    for node in kube.list_nodes():
        name = _meta(node)["name"]
        record = latest_record(records, name)
        plan = plan_node(node, record, names, namespace)
        if not (plan.removed or plan.left):
            continue
        report.nodes.append(NodeCleanup(name, plan.removed, plan.left))
        if dry_run:
            continue

        def node_ops(obj: JSON, record: JSON | None = record) -> list[JSON]:
            return plan_node(obj, record, names, namespace).ops

        def status_ops(obj: JSON, record: JSON | None = record) -> list[JSON]:
            return plan_node(obj, record, names, namespace).status_ops

        if plan.ops:
            _patch_fresh(kube, name, node_ops, status=False)
        if plan.status_ops:
            _patch_fresh(kube, name, status_ops, status=True)
    for pod in kube.list_items("/api/v1/pods"):
        meta = _meta(pod)
        keys = pod_annotations_ours(names, meta.get("annotations") or {})
        if not keys:
            continue
        report.pods.append(f"{meta['namespace']}/{meta['name']}: "
                           f"{'would remove' if dry_run else 'removed'} annotation {', '.join(keys)}")
        if not dry_run:
            with contextlib.suppress(NotFound):  # the pod went meanwhile
                kube.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                           {"metadata": {"annotations": dict.fromkeys(keys)}})
    return report


def uninstall(kube: Kube, names: Names, namespace: str, *, stop: bool = False, wait_seconds: float = 0,
              dry_run: bool = False, clock: Clock | None = None,
              sleep: Callable[[float], None] = time.sleep) -> Report:
    """``stop``: delete the parts that write marks first; then wait up to ``wait_seconds`` for
    them to be gone (``StillRunning`` if they are not), and clean."""
    clock = clock or SystemClock()
    if stop and not dry_run:
        stop_parts(kube, namespace)
    parts = wait_stopped(kube, namespace, clock, 0 if dry_run else wait_seconds, sleep)
    if parts and not dry_run:
        raise StillRunning(parts)
    return clean(kube, names, namespace, dry_run=dry_run)


def report_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)
