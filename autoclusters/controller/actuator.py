"""Carries out the state machine's actions on the cluster.

Every write touches only what it names, and each effect of the (normalised) plan is one
write, dispatched in order without looking ahead. Marking (label, taint; when a repair
starts also the cordon and the warning's node annotations) and unmarking are each one JSON
patch that first ``test``s the node's resourceVersion (and, for a removal, the taint at its
index), so a concurrent writer of ``spec.taints`` is never overwritten: on a failed test the
node is read again and the patch rebuilt. Each action is idempotent: it checks the node
first, and a node that already is as asked costs no request.

The warning before a drain goes on the node in the marking's patch (only the keys it
names, so it is there the moment the node is cordoned), then one merge patch and one event
per pod not yet warned for this record. Unmarking removes the warning's annotations and
every acknowledgement in the same JSON patch as the labels.

A node Karpenter launched (it carries ``karpenter.sh/nodepool``) also gets Karpenter's
``karpenter.sh/do-not-disrupt`` and ``karpenter.sh/do-not-repair`` annotations while it is
marked, so neither Karpenter's voluntary disruption (consolidation, drift) nor its node
repair acts on a node under repair; unmarking removes them again only when autoclusters
added them (a marker annotation lists which), never a user's own.
It also gets the time of its marking, from which the Karpenter provider counts new nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from autoclusters import names as n
from autoclusters.clock import Clock, SystemClock, utc_iso
from autoclusters.controller import drain as drainrules
from autoclusters.controller import hook as hookcalls
from autoclusters.controller import messages as words
from autoclusters.controller.notifier import Notifier
from autoclusters.controller.statemachine import (
    ClearWarning,
    Drain,
    DriveProvider,
    Effect,
    Emit,
    EnsureMarked,
    Notify,
    RepairState,
    Unmark,
    Warn,
)
from autoclusters.kube import Kube, KubeError, NotFound, TooManyRequests
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.kube.json_patch import pointer
from autoclusters.names import Names
from autoclusters.pools.pool_config import PreDrainHook
from autoclusters.providers.base import Provider, ProviderError
from autoclusters.providers.registry import node_guards

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def _guard_annotations() -> frozenset[str]:
    """Every annotation a provider's node guard writes."""
    return frozenset(k for g in node_guards() for k in g.annotations)



class Actuator:
    def __init__(self, kube: Kube, names: Names, recorder: EventRecorder, notifier: Notifier,
                 clock: Clock | None = None, hooks: hookcalls.HookRunner | None = None) -> None:
        self._kube = kube
        self._names = names
        self._recorder = recorder
        self._notifier = notifier
        self._clock = clock or SystemClock()
        self.hooks = hooks or hookcalls.HookRunner()  # pre-drain hooks run there, never on the caller's thread

    def run(self, actions: tuple[Effect, ...], node: str, node_obj: JSON | None, state: RepairState | None,
            provider: Provider | None, hook: PreDrainHook | None = None,
            pods: list[JSON] | None = None, node_written: Callable[[JSON], None] | None = None) -> JSON | None:
        """Carries out ``actions`` in order, one write per effect (the state machine's plan is
        normalised: no effect depends on the next); returns the node as last written (or the
        one given). ``pods``: the node's pods as this reconcile listed them (None: list them).
        ``node_written`` gets the node as last written when a write changed it, also when a
        later write fails: the next reconcile reads what was written (the warning on the node
        is what says the pre-drain hook was called).

        A write that fails (an API error, a conflict lost five times, a timeout) stops the
        writes after it, and the error is raised once the plan's announcements (its events and
        notifications) have gone out: the state that asked for the plan is stored already, so
        the next reconcile derives the writes again from it (a closed record's leftover marks
        are removed by the cleanup), but nothing announces a step a second time, and an event
        that waited for the write would be lost (a repair's ``MaintenanceSucceeded`` after a
        failed unmark). The announcements never raise."""
        current = node_obj
        failed: Exception | None = None
        for action in actions:
            if isinstance(action, Emit):
                uid = ((current or {}).get("metadata") or {}).get("uid", "")
                self._recorder.emit(ObjectRef("Node", node, uid=uid), action.reason, action.message,
                                    warning=action.warning)
            elif isinstance(action, Notify):
                self._notifier.notify(f"autoclusters: repair of node {node} needs a human", {
                    "node": node, "pool": state.pool if state else "", "record": state.name if state else "",
                    "fault": state.fault.key if state else "", "message": action.message})
            elif failed is None:
                try:
                    current = self._write(action, node, current, state, provider, hook, pods)
                except Exception as e:  # noqa: BLE001 - raised below, after the announcements
                    failed = e
        if node_written is not None and current is not None and current is not node_obj:
            node_written(current)
        if failed is not None:
            raise failed
        return current

    def _write(self, action: Effect, node: str, current: JSON | None, state: RepairState | None,
               provider: Provider | None, hook: PreDrainHook | None, pods: list[JSON] | None) -> JSON | None:
        """One effect that writes (to the node, its pods or the provider); returns the node as
        last written."""
        if isinstance(action, DriveProvider):
            if provider is None:  # the next observation reports why (the pool's provider went away)
                log.warning("node %s: no provider to drive operation %s", node, action.operation.id)
                return current
            # a provider may act through a backend of its own: fenced here as the client fences writes
            self._kube.check_fence(f"provider {provider.name} {action.operation.action} on node {node}")
            try:
                provider.drive(action.operation, node, state.pool if state else "")
            except ProviderError as e:  # a setting the provider refuses: its progress reports the failure
                log.warning("node %s: provider %s refused operation %s: %s", node, provider.name,
                            action.operation.id, e)
        elif current is None:
            pass  # the node is gone: nothing to mark, cordon or drain
        elif isinstance(action, EnsureMarked):
            current = self.ensure_marked(current, cordon=action.cordon, warning=action.warning, state=state,
                                         clear_warning=action.clear_warning)
        elif isinstance(action, Warn):
            if state is not None:
                self.warn(current, state, action, hook, pods)
        elif isinstance(action, ClearWarning):
            current = self.clear_warning(current)
        elif isinstance(action, Unmark):
            current = self.unmark(current, uncordon=action.uncordon)
        elif isinstance(action, Drain):
            self.drain(node, force=action.force, pods=pods)
        return current

    # --- labels, taint, cordon ---------------------------------------------------------------
    def _taint(self) -> JSON:
        return {"key": self._names.taint_key, "value": "true", "effect": "PreferNoSchedule"}

    def _has_taint(self, node: JSON) -> int:
        for i, t in enumerate((node.get("spec") or {}).get("taints") or []):
            if t.get("key") == self._names.taint_key and t.get("effect") == "PreferNoSchedule":
                return i
        return -1

    def ensure_marked(self, node: JSON, *, cordon: bool = False, warning: Warn | None = None,
                      state: RepairState | None = None, clear_warning: bool = False) -> JSON:
        """Label and taint, and when asked the cordon, the warning's node annotations (for the
        record of ``state``) or their removal: one JSON patch, one request. It tests only what it
        depends on (the taints it appends to, the values it removes; the annotations as a whole
        when it adds Karpenter's guards, which are ours only if they were absent), so a status
        heartbeat or another writer's annotation does not cost a retry; a lost race reads the
        node again and computes the patch anew."""
        key, appr = self._names.maintenance_required, self._names.maintenance_approved
        stray = ""

        def ops_for(node: JSON) -> list[JSON]:
            nonlocal stray
            labels = node["metadata"].get("labels")
            taints = (node.get("spec") or {}).get("taints")
            annotations_now = node["metadata"].get("annotations")
            ops: list[JSON] = []
            if (labels or {}).get(key) != "true":
                ops.append({"op": "add", "path": f"/metadata/labels/{pointer(key)}", "value": "true"}
                           if labels is not None else {"op": "add", "path": "/metadata/labels", "value": {key: "true"}})
            # An approval already there while maintenance-required is not approves nothing, and must
            # not start to once the label it needs arrives: it goes in the same write (the patch
            # tests its value, so a user's newer approval is not taken for it).
            stray = str((labels or {})[appr]) if appr in (labels or {}) and key not in (labels or {}) else ""
            if stray:
                ops.append({"op": "remove", "path": f"/metadata/labels/{pointer(appr)}"})
            if self._has_taint(node) < 0:
                ops.append({"op": "add", "path": "/spec/taints/-", "value": self._taint()} if taints is not None
                           else {"op": "add", "path": "/spec/taints", "value": [self._taint()]})
            if cordon and not (node.get("spec") or {}).get("unschedulable"):
                ops.append({"op": "add", "path": "/spec/unschedulable", "value": True})
            add = self._guard_annotations(node)
            if warning is not None and state is not None:
                add.update(self._node_warning(node, state, warning))
            guarded = _guard_annotations()
            if annotations_now is not None and any(k in guarded or k == n.SLINKY_CORDON_REASON for k in add):
                # Karpenter's guards and Slinky's reason are ours only if absent (or ours) as read:
                # the annotations are tested as a whole, so a user's own written meanwhile is kept
                ops.insert(0, {"op": "test", "path": "/metadata/annotations", "value": annotations_now})
            annotations = node["metadata"].get("annotations")
            if add and annotations is None:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": add})
            else:
                ops += [{"op": "add", "path": f"/metadata/annotations/{pointer(k)}", "value": v}
                        for k, v in add.items()]
            if clear_warning:
                ops += self._warning_removals(node)
            return ops

        written = self._kube.patch_node_guarded(node, ops_for, fields_only=True)
        if stray:
            self._stray_approval_removed(written, stray)
        return written

    def _guard_annotations(self, node: JSON) -> dict[str, str]:
        """The providers' node guards (``ProviderKind.guards``: Karpenter's do-not-disrupt on a
        Karpenter node) on a node that carries a guard's label, with our marker, unless already there."""
        meta = node["metadata"]
        labels = meta.get("labels") or {}
        guards = [g for g in node_guards() if g.label in labels]
        if not guards:
            return {}
        annotations = meta.get("annotations")
        add: dict[str, str] = {}
        if any(g.stamp_marked_at for g in guards) and self._names.marked_at_annotation not in (annotations or {}):
            add[self._names.marked_at_annotation] = utc_iso(self._clock.now())
        wanted = dict.fromkeys(k for g in guards for k in g.annotations)
        added = [k for k in wanted if (annotations or {}).get(k) != "true"]  # a user's own stays theirs
        if added:
            add.update({k: "true" for k in added})
            add[self._names.karpenter_guard_marker] = ",".join(added)
        return add

    def unmark(self, node: JSON, *, uncordon: bool) -> JSON:
        """Taint, both labels and (when asked) the cordon removed in one JSON patch that tests
        each value it removes (the taint at its index among them)."""
        def ops_for(node: JSON) -> list[JSON]:
            labels = node["metadata"].get("labels") or {}
            ops: list[JSON] = []
            idx = self._has_taint(node)
            if idx >= 0:
                ops += [{"op": "test", "path": f"/spec/taints/{idx}", "value": node["spec"]["taints"][idx]},
                        {"op": "remove", "path": f"/spec/taints/{idx}"}]
            removed = [k for k in (self._names.maintenance_required, self._names.maintenance_approved) if k in labels]
            if self._names.maintenance_required in removed:
                # the labels as read, tested whole: an approval added since the read (a person
                # approving as the repair ends) fails the patch, which is computed anew from the
                # node read again and so takes the approval too; no stray is left behind
                ops.append({"op": "test", "path": "/metadata/labels", "value": labels})
            ops += [{"op": "remove", "path": f"/metadata/labels/{pointer(k)}"} for k in removed]
            # The cordon goes only with our marks: a node read again (a lost race) that no longer
            # carries them was unmarked already, and a cordon on it now is someone else's.
            still_ours = idx >= 0 or self._names.maintenance_required in labels
            if uncordon and still_ours and (node.get("spec") or {}).get("unschedulable"):
                ops.append({"op": "remove", "path": "/spec/unschedulable"})
            annotations = node["metadata"].get("annotations") or {}
            ours = [self._names.marked_at_annotation, self._names.karpenter_guard_marker]
            ours += [k for k in str(annotations.get(self._names.karpenter_guard_marker, "")).split(",")
                     if k in _guard_annotations()]  # the ones we added go; a user's own stay
            ops += [{"op": "remove", "path": f"/metadata/annotations/{pointer(k)}"} for k in ours if k in annotations]
            return ops + self._warning_removals(node)

        return self._kube.patch_node_guarded(node, ops_for, fields_only=True)

    def remove_stray_approval(self, node: JSON) -> JSON:
        """The approval label removed from a node that does not carry maintenance-required (no
        repair it could approve; admission refuses such a label, but one may predate the rule, or
        have come through a path admission did not cover), with a Warning event. The patch tests
        the labels as read, so an approval that a maintenance-required written meanwhile backs is
        never removed: read again, there is nothing to do. Returns the node as last seen."""
        appr, req = self._names.maintenance_approved, self._names.maintenance_required
        removed = ""

        def ops_for(node: JSON) -> list[JSON]:
            nonlocal removed
            labels = node["metadata"].get("labels") or {}
            removed = str(labels[appr]) if appr in labels and req not in labels else ""
            if not removed:
                return []
            return [{"op": "test", "path": "/metadata/labels", "value": labels},
                    {"op": "remove", "path": f"/metadata/labels/{pointer(appr)}"}]

        written = self._kube.patch_node_guarded(node, ops_for, fields_only=True)
        if removed:
            self._stray_approval_removed(written, removed)
        return written

    def _stray_approval_removed(self, node: JSON, value: str) -> None:
        appr, req = self._names.maintenance_approved, self._names.maintenance_required
        name = node["metadata"]["name"]
        log.warning("node %s: removed %s=%s, which no %s backed", name, appr, value, req)
        self._recorder.emit(ObjectRef("Node", name, uid=node["metadata"].get("uid", "")),
                            n.EVENT_STRAY_APPROVAL_REMOVED, words.stray_approval_removed(appr, value, req),
                            warning=True)

    # --- the warning before the drain -----------------------------------------------------------
    def _warning_removals(self, node: JSON) -> list[JSON]:
        """JSON patch ``remove``s for the warning's node annotations, every acknowledgement, and
        Slinky's cordon reason when it is ours (an admin's reason is left alone)."""
        annotations = node["metadata"].get("annotations") or {}
        ours = set(self._names.warning_annotations)
        remove = [k for k, v in annotations.items()
                  if k in ours or k.startswith(self._names.drain_ack_prefix)
                  or (k == n.SLINKY_CORDON_REASON and str(v).startswith(n.DRAIN_REASON_PREFIX))]
        return [{"op": "remove", "path": f"/metadata/annotations/{pointer(k)}"} for k in sorted(remove)]

    def clear_warning(self, node: JSON) -> JSON:
        """The warning's annotations and the acknowledgements removed; labels and taint stay."""
        return self._kube.patch_node_guarded(node, self._warning_removals, fields_only=True)

    def _warning(self, state: RepairState, action: Warn) -> dict[str, str]:
        return {self._names.drain_deadline: utc_iso(action.deadline), self._names.drain_reason: action.reason,
                self._names.remediation: state.name}

    def _node_warning(self, node: JSON, state: RepairState, action: Warn) -> dict[str, str]:
        """The warning's node annotations that differ from what the node carries; Slinky's cordon
        reason only when asked and not an admin's own."""
        annotations = node["metadata"].get("annotations") or {}
        on_node = self._warning(state, action)
        slinky = annotations.get(n.SLINKY_CORDON_REASON)
        if action.slinky and (slinky is None or str(slinky).startswith(n.DRAIN_REASON_PREFIX)):
            on_node[n.SLINKY_CORDON_REASON] = f"{n.DRAIN_REASON_PREFIX} {action.reason}"
        return {k: v for k, v in on_node.items() if annotations.get(k) != v}

    def warn(self, node: JSON, state: RepairState, action: Warn, hook: PreDrainHook | None,
             pods: list[JSON] | None = None) -> None:
        """Each pod not yet warned for this record: the warning's annotations and an event; then
        the hook, once. (The node's annotations went with the marking.)"""
        wanted = self._warning(state, action)
        message = words.pod_drain_warning(state.node, state.action, wanted[self._names.drain_deadline],
                                          action.reason, self._names.drain_wait_label, self._names.pod_drain_ack,
                                          state.name)
        for pod in drainrules.drainable(self._kube.pods_on_node(state.node) if pods is None else pods):
            meta = pod["metadata"]
            if drainrules.warned_for(pod, self._names.remediation) == state.name or meta.get("deletionTimestamp"):
                continue
            ns, name = meta["namespace"], meta["name"]
            try:
                self._kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}", {"metadata": {"annotations": wanted}})
            except NotFound:
                continue
            except KubeError as e:
                # e.g. an admission policy that refuses pod updates: the pod still gets its event,
                # and a failed annotation never stalls the repair (the deadline holds anyway)
                log.warning("pre-drain warning: annotating pod %s/%s failed: %s", ns, name, e)
            self._recorder.emit(ObjectRef("Pod", name, uid=meta.get("uid", ""), namespace=ns),
                                n.EVENT_DRAIN_WARNING, message, warning=True)
        if action.call_hook and hook is not None:
            self._call_hook(node, state, action, hook)

    def _call_hook(self, node: JSON, state: RepairState, action: Warn, hook: PreDrainHook) -> None:
        """Started on the hook runner's threads; this returns at once (``report_hooks`` tells)."""
        if not self.hooks.start(hook, hookcalls.payload(state, action.deadline, action.reason)):
            log.info("pre-drain hook for %s (%s) is still running; not started again", state.node, state.name)

    def report_hooks(self, name: str, node: JSON | None) -> None:
        """The node's hooks that ended since its last reconcile: a failure as a Warning event on
        the node, a success in the log. (Their answers were redacted where they were read.)"""
        for result in self.hooks.take(name):
            if result.ok:
                log.info("pre-drain hook for %s (%s): %s", name, result.record, result.answer)
                continue
            log.warning("pre-drain hook for %s (%s) failed: %s", name, result.record, result.answer)
            uid = ((node or {}).get("metadata") or {}).get("uid", "")
            self._recorder.emit(ObjectRef("Node", name, uid=uid), n.EVENT_HOOK_FAILED,
                                words.hook_failed(result.answer), warning=True)

    # --- drain ---------------------------------------------------------------------------------
    def drain(self, node: str, *, force: bool, pods: list[JSON] | None = None) -> drainrules.DrainPass:
        """One pass. Before the deadline: the Eviction API (PDBs and each pod's grace period
        honoured; a slurmd pod only once Slurm has drained it). At the deadline: delete what is
        left without cutting a pod's own grace period short (``drain.at_deadline``)."""
        evicted = blocked = deleted = terminating = held = 0
        now = self._clock.now()
        for pod in drainrules.drainable(self._kube.pods_on_node(node) if pods is None else pods):
            meta = pod["metadata"]
            ns, name = meta["namespace"], meta["name"]
            try:
                if force:
                    step = drainrules.at_deadline(pod, now)
                    if step == drainrules.DeadlineStep.WAIT:
                        terminating += 1
                        continue
                    self._kube.delete_pod(ns, name, grace_seconds=0 if step == drainrules.DeadlineStep.DELETE_NOW
                                          else None)
                    deleted += 1
                elif meta.get("deletionTimestamp"):
                    terminating += 1  # its grace period is running; the next pass looks again
                elif drainrules.held_for_slurm(pod):
                    held += 1  # Slurm has not drained this slurmd pod's node yet
                else:
                    self._kube.evict(ns, name)
                    evicted += 1
            except TooManyRequests:
                blocked += 1  # a PodDisruptionBudget says not now
            except NotFound:
                pass
        result = drainrules.DrainPass(evicted, blocked, deleted, terminating, held)
        if blocked or deleted or held:
            log.info("drain %s: %s", node, result)
        return result
