"""Carries out the state machine's actions on the cluster.

Every write touches only what it names. Marking (label, taint, and the cordon when a
repair starts) and unmarking are each one JSON patch that first ``test``s the node's
resourceVersion (and, for a removal, the taint at its index), so a concurrent writer of
``spec.taints`` is never overwritten: on a failed test the node is read again and the patch
rebuilt. A lone cordon is a merge patch of ``spec.unschedulable``. Each action is
idempotent: it checks the node first.
"""

from __future__ import annotations

import logging
from typing import Any

from autoclusters.controller import drain as drainrules
from autoclusters.controller.notifier import Notifier
from autoclusters.controller.statemachine import (
    Action,
    Cordon,
    Drain,
    DriveProvider,
    Emit,
    EnsureMarked,
    Notify,
    RepairState,
    Unmark,
)
from autoclusters.kube import Kube, NotFound, TooManyRequests
from autoclusters.kube.events import EventRecorder, ObjectRef
from autoclusters.names import Names
from autoclusters.providers import Provider

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def _pointer(key: str) -> str:
    """A JSON pointer segment (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


class Actuator:
    def __init__(self, kube: Kube, names: Names, recorder: EventRecorder, notifier: Notifier) -> None:
        self._kube = kube
        self._names = names
        self._recorder = recorder
        self._notifier = notifier

    def run(self, actions: tuple[Action, ...], node: str, node_obj: JSON | None, state: RepairState | None,
            provider: Provider | None) -> JSON | None:
        """Runs ``actions`` in order; returns the node as last written (or the one given)."""
        current = node_obj
        merged_cordon = False
        for i, action in enumerate(actions):
            if merged_cordon and isinstance(action, Cordon):
                merged_cordon = False
                continue
            if isinstance(action, Emit):
                uid = ((current or {}).get("metadata") or {}).get("uid", "")
                self._recorder.emit(ObjectRef("Node", node, uid=uid), action.reason, action.message,
                                    warning=action.warning)
            elif isinstance(action, Notify):
                self._notifier.notify(f"autoclusters: repair of node {node} needs a human", {
                    "node": node, "pool": state.pool if state else "", "record": state.name if state else "",
                    "fault": state.fault.key if state else "", "message": action.message})
            elif isinstance(action, DriveProvider):
                if provider is None:
                    raise RuntimeError(f"no provider for the pool of node {node}")
                provider.drive(action.operation, node, state.pool if state else "")
            elif current is None:
                continue  # the node is gone: nothing to mark, cordon or drain
            elif isinstance(action, EnsureMarked):
                # a Cordon right behind (a repair starting) goes into the same patch
                merged_cordon = any(isinstance(a, Cordon) for a in actions[i + 1:i + 3]) and all(
                    isinstance(a, Cordon | Emit) for a in actions[i + 1:i + 3])
                current = self.ensure_marked(current, cordon=merged_cordon)
            elif isinstance(action, Unmark):
                current = self.unmark(current, uncordon=action.uncordon)
            elif isinstance(action, Cordon):
                current = self.cordon(current)
            elif isinstance(action, Drain):
                self.drain(node, force=action.force)
        return current

    # --- labels, taint, cordon ---------------------------------------------------------------
    def _taint(self) -> JSON:
        return {"key": self._names.taint_key, "value": "true", "effect": "PreferNoSchedule"}

    def _has_taint(self, node: JSON) -> int:
        for i, t in enumerate((node.get("spec") or {}).get("taints") or []):
            if t.get("key") == self._names.taint_key and t.get("effect") == "PreferNoSchedule":
                return i
        return -1

    def ensure_marked(self, node: JSON, *, cordon: bool = False) -> JSON:
        """Label and taint (and the cordon, when asked) in one JSON patch guarded by the
        resourceVersion: one request."""
        key = self._names.maintenance_required

        def ops_for(node: JSON) -> list[JSON]:
            labels = node["metadata"].get("labels")
            taints = (node.get("spec") or {}).get("taints")
            ops: list[JSON] = []
            if (labels or {}).get(key) != "true":
                ops.append({"op": "add", "path": f"/metadata/labels/{_pointer(key)}", "value": "true"}
                           if labels is not None else {"op": "add", "path": "/metadata/labels", "value": {key: "true"}})
            if self._has_taint(node) < 0:
                ops.append({"op": "add", "path": "/spec/taints/-", "value": self._taint()} if taints is not None
                           else {"op": "add", "path": "/spec/taints", "value": [self._taint()]})
            if cordon and not (node.get("spec") or {}).get("unschedulable"):
                ops.append({"op": "add", "path": "/spec/unschedulable", "value": True})
            return ops

        return self._kube.patch_node_guarded(node, ops_for)

    def unmark(self, node: JSON, *, uncordon: bool) -> JSON:
        """Taint, both labels and (when asked) the cordon removed in one JSON patch that tests
        the resourceVersion and the taint at its index."""
        def ops_for(node: JSON) -> list[JSON]:
            labels = node["metadata"].get("labels") or {}
            ops: list[JSON] = []
            idx = self._has_taint(node)
            if idx >= 0:
                ops += [{"op": "test", "path": f"/spec/taints/{idx}", "value": node["spec"]["taints"][idx]},
                        {"op": "remove", "path": f"/spec/taints/{idx}"}]
            for key in (self._names.maintenance_required, self._names.maintenance_approved):
                if key in labels:
                    ops.append({"op": "remove", "path": f"/metadata/labels/{_pointer(key)}"})
            if uncordon and (node.get("spec") or {}).get("unschedulable"):
                ops.append({"op": "remove", "path": "/spec/unschedulable"})
            return ops

        return self._kube.patch_node_guarded(node, ops_for)

    def cordon(self, node: JSON) -> JSON:
        if (node.get("spec") or {}).get("unschedulable"):
            return node
        return self._kube.patch_node(node["metadata"]["name"], {"spec": {"unschedulable": True}})

    # --- drain ---------------------------------------------------------------------------------
    def drain(self, node: str, *, force: bool) -> drainrules.DrainPass:
        evicted = blocked = deleted = terminating = 0
        for pod in drainrules.drainable(self._kube.pods_on_node(node)):
            meta = pod["metadata"]
            ns, name = meta["namespace"], meta["name"]
            try:
                if force:
                    self._kube.delete_pod(ns, name, grace_seconds=0)
                    deleted += 1
                elif meta.get("deletionTimestamp"):
                    terminating += 1  # its grace period is running; the next pass looks again
                else:
                    self._kube.evict(ns, name)
                    evicted += 1
            except TooManyRequests:
                blocked += 1  # a PodDisruptionBudget says not now
            except NotFound:
                pass
        result = drainrules.DrainPass(evicted, blocked, deleted, terminating)
        if blocked or deleted:
            log.info("drain %s: %s", node, result)
        return result
