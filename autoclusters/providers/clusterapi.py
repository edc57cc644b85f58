"""The Cluster API provider: repairs by acting on the Machine that owns the node.

- replace: delete the Machine; its MachineSet/MachineDeployment creates a new one and a
  new node joins the pool. Done when the Machine is gone.
- reset: Cluster API has no reboot verb; the provider sets the Machine's remediation
  annotation (``cluster.x-k8s.io/remediate-machine``), which the owning controller (or an
  external remediation template) acts on. Done when the node reports a new boot id.

The node names its Machine through the ``cluster.x-k8s.io/machine`` and
``cluster.x-k8s.io/cluster-namespace`` annotations that Cluster API writes on every node.
The operation id is written on the Machine, so a retried ``drive`` does nothing twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from autoclusters.clock import Clock, utc_iso
from autoclusters.controller.statemachine import Operation, ProviderState, ProviderView, RepairAction
from autoclusters.kube import Kube, NotFound
from autoclusters.providers.base import NodeLookup, ProviderError

CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta1"
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
REMEDIATE_ANNOTATION = "cluster.x-k8s.io/remediate-machine"
OPERATION_ANNOTATION = "remediation.autoclusters.io/operation"


@dataclass(frozen=True)
class MachineRef:
    namespace: str
    name: str

    def path(self, version: str = CAPI_VERSION) -> str:
        return Kube.custom_path(CAPI_GROUP, version, "machines", self.name, self.namespace)


def machine_ref(node: dict[str, Any] | None) -> MachineRef | None:
    """The Machine that owns ``node``, from the annotations Cluster API writes."""
    ann = ((node or {}).get("metadata") or {}).get("annotations") or {}
    name, ns = ann.get(MACHINE_ANNOTATION), ann.get(NAMESPACE_ANNOTATION)
    return MachineRef(ns, name) if name and ns else None


def remediation_patch(op: Operation, now: str) -> dict[str, Any]:
    """Merge patch for a reset: the remediation request and our operation id, nothing else."""
    return {"metadata": {"annotations": {REMEDIATE_ANNOTATION: now, OPERATION_ANNOTATION: op.id}}}


def boot_id(node: dict[str, Any] | None) -> str:
    return str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))


class ClusterApiProvider:
    name = "clusterapi"

    def __init__(self, kube: Kube, clock: Clock, *, version: str = CAPI_VERSION) -> None:
        self._kube = kube
        self._clock = clock
        self._version = version
        self._machines: dict[str, MachineRef] = {}  # node -> machine, remembered before the node goes away

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""  # the infrastructure provider names the new node

    def refusal(self, node: dict[str, Any] | None) -> str:
        if node is not None and machine_ref(node) is None:
            name = (node.get("metadata") or {}).get("name", "")
            return (f"node {name} names no Cluster API Machine (annotations {MACHINE_ANNOTATION} and "
                    f"{NAMESPACE_ANNOTATION}): the clusterapi provider cannot repair it")
        return ""

    def _ref(self, node: str, lookup: NodeLookup | None = None) -> MachineRef | None:
        if node in self._machines:
            return self._machines[node]
        obj = lookup(node) if lookup else None
        if obj is None and lookup is None:
            with contextlib.suppress(NotFound):
                obj = self._kube.get_node(node)
        ref = machine_ref(obj)
        if ref:
            self._machines[node] = ref
        return ref

    def drive(self, op: Operation, node: str, pool: str) -> None:
        ref = self._ref(node)
        if ref is None:
            raise ProviderError(f"node {node} names no Cluster API Machine ({MACHINE_ANNOTATION} annotation)")
        try:
            machine = self._kube.get(ref.path(self._version))
        except NotFound:
            return  # already deleted: the replacement is under way or done
        ann = (machine.get("metadata") or {}).get("annotations") or {}
        if ann.get(OPERATION_ANNOTATION) == op.id and op.action == RepairAction.RESET:
            return
        if op.action == RepairAction.RESET:
            self._kube.patch(ref.path(self._version), remediation_patch(op, utc_iso(self._clock.now())))
            return
        if (machine.get("metadata") or {}).get("deletionTimestamp"):
            return
        self._kube.patch(ref.path(self._version), {"metadata": {"annotations": {OPERATION_ANNOTATION: op.id}}})
        with contextlib.suppress(NotFound):
            self._kube.delete(ref.path(self._version))

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        ref = self._ref(node, lookup)
        if ref is None:
            return ProviderView(ProviderState.FAILED, f"node {node} names no Cluster API Machine")
        try:
            machine = self._kube.get(ref.path(self._version))
        except NotFound:
            machine = None
        ann = ((machine or {}).get("metadata") or {}).get("annotations") or {}
        if op.action == RepairAction.REPLACE:
            if machine is None:
                return ProviderView(ProviderState.SUCCEEDED)
            return ProviderView(ProviderState.RUNNING if ann.get(OPERATION_ANNOTATION) == op.id
                                else ProviderState.NOT_STARTED)
        if ann.get(OPERATION_ANNOTATION) != op.id:
            return ProviderView(ProviderState.NOT_STARTED)
        current = lookup(node)
        if current is not None and boot_id(current) not in ("", op.boot_id_before):
            return ProviderView(ProviderState.SUCCEEDED)
        return ProviderView(ProviderState.RUNNING)
