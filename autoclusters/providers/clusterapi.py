"""The Cluster API provider: repairs by acting on the Machine that owns the node.

- replace: delete the Machine; Cluster API drains and deletes its node, and the owning
  MachineSet creates a Machine in its place whose node joins the pool. Done when the Machine
  and the old node are both gone and a new Ready node of the pool, from a Machine of the same
  namespace, is matched to the operation (one for one, as for Karpenter: the operation id is
  written on the new node with a resourceVersion-guarded patch, so two replacements never
  count one node). A Machine gone while its node stays (Cluster API gives up deleting a node
  after the Machine's ``nodeDeletionTimeout``) is not a finished replacement: the old node
  could still run work and report faults.
- reset: Cluster API has no reboot verb; the provider sets the Machine's remediation
  annotation (``cluster.x-k8s.io/remediate-machine``), which the owning controller (or an
  external remediation template) acts on. Done when the node reports a new boot id.

The node names its Machine through the ``cluster.x-k8s.io/machine`` and
``cluster.x-k8s.io/cluster-namespace`` annotations that Cluster API writes on every node.
The operation id is written on the Machine, so a retried ``drive`` does nothing twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.clock import Clock, utc_iso
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeLookup, Provider, ProviderError
from autoclusters.providers.declaration import ProviderKind, Rule, Setting
from autoclusters.providers.replacement import ReplacementClaims
from autoclusters.providers.types import Operation, ProviderState, ProviderView

# The Cluster API versions of Machine the clusterapi provider speaks, the default first:
# v1beta2 is Cluster API's storage version from v1.11 on; older releases serve only v1beta1.
CLUSTERAPI_VERSIONS = ("v1beta2", "v1beta1")
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = CLUSTERAPI_VERSIONS[0]
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
REMEDIATE_ANNOTATION = "cluster.x-k8s.io/remediate-machine"


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


def remediation_patch(op: Operation, now: str, names: Names) -> dict[str, Any]:
    """Merge patch for a reset: the remediation request and our operation id, nothing else."""
    return {"metadata": {"annotations": {REMEDIATE_ANNOTATION: now, names.operation_annotation: op.id}}}


def boot_id(node: dict[str, Any] | None) -> str:
    return str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))


class ClusterApiProvider:
    name = "clusterapi"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, version: str = CAPI_VERSION) -> None:
        self._kube = kube
        self._clock = clock
        self._names = names
        self._version = version  # as configured; what the cluster serves is resolved on first use
        self._served = ""
        self._machines: dict[str, MachineRef] = {}  # node -> machine, remembered before the node goes away
        self._claims = ReplacementClaims(kube, names)

    @property
    def operation_annotation(self) -> str:
        """The annotation that matches a new node to the replacement it serves."""
        return self._claims.operation_annotation

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""  # the infrastructure provider names the new node

    def refusal(self, node: dict[str, Any] | None) -> str:
        if node is not None and machine_ref(node) is None:
            name = (node.get("metadata") or {}).get("name", "")
            return (f"node {name} names no Cluster API Machine (annotations {MACHINE_ANNOTATION} and "
                    f"{NAMESPACE_ANNOTATION}): the clusterapi provider cannot repair it")
        if node is not None:
            try:
                self.served_version()
            except ProviderError as e:
                return str(e)
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

    def served_version(self) -> str:
        """The Machine version to use: the configured one if the cluster serves it, else the other
        (Cluster API before v1.11 serves only v1beta1). Asked of the group's discovery, never
        guessed from a Machine's 404, which would read as "the Machine is gone"."""
        if not self._served:
            for version in (self._version, *(v for v in CLUSTERAPI_VERSIONS if v != self._version)):
                try:
                    found = self._kube.get(f"/apis/{CAPI_GROUP}/{version}")
                except NotFound:
                    continue
                if any(r.get("name") == "machines" for r in found.get("resources") or []):
                    self._served = version
                    break
            else:
                raise ProviderError(f"the cluster serves no Cluster API Machines ({CAPI_GROUP} "
                                    f"{' or '.join(CLUSTERAPI_VERSIONS)}): is Cluster API installed?")
        return self._served

    def _path(self, ref: MachineRef) -> str:
        return ref.path(self.served_version())

    def _machine(self, ref: MachineRef) -> dict[str, Any] | None:
        try:
            return self._kube.get(self._path(ref))
        except NotFound:
            return None

    def _same_cluster(self, ref: MachineRef) -> Callable[[dict[str, Any]], bool]:
        """A node Cluster API made for another Machine of the same namespace."""
        def test(candidate: dict[str, Any]) -> bool:
            other = machine_ref(candidate)
            return other is not None and other.namespace == ref.namespace and other != ref
        return test

    def drive(self, op: Operation, node: str, pool: str) -> None:
        ref = self._ref(node)
        if ref is None:
            raise ProviderError(f"node {node} names no Cluster API Machine ({MACHINE_ANNOTATION} annotation)")
        machine = self._machine(ref)
        if machine is None:
            if op.action == RepairAction.REPLACE:  # deleted: match the node its MachineSet brings
                nodes = self._kube.list_nodes(f"{self._names.pool_label}={pool}")
                if self._claims.claimed_by(op, nodes) is None:
                    self._claims.claim(op, node, pool, self._claims.candidates(op, node, nodes),
                                       also=self._same_cluster(ref))
            return
        ann = (machine.get("metadata") or {}).get("annotations") or {}
        if ann.get(self._names.operation_annotation) == op.id and op.action == RepairAction.RESET:
            return
        if op.action == RepairAction.RESET:
            self._kube.patch(self._path(ref), remediation_patch(op, utc_iso(self._clock.now()), self._names))
            return
        if (machine.get("metadata") or {}).get("deletionTimestamp"):
            return
        self._kube.patch(self._path(ref), {"metadata": {"annotations": {self._names.operation_annotation: op.id}}})
        with contextlib.suppress(NotFound):
            self._kube.delete(self._path(ref))

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        ref = self._ref(node, lookup)
        if ref is None:
            return ProviderView(ProviderState.FAILED, f"node {node} names no Cluster API Machine")
        try:
            self.served_version()
        except ProviderError as e:
            return ProviderView(ProviderState.FAILED, str(e))
        machine = self._machine(ref)
        ann = ((machine or {}).get("metadata") or {}).get("annotations") or {}
        if op.action == RepairAction.REPLACE:
            return self._replace_progress(op, node, pool, ref, machine, lookup)
        if ann.get(self._names.operation_annotation) != op.id:
            return ProviderView(ProviderState.NOT_STARTED)
        current = lookup(node)
        if current is not None and boot_id(current) not in ("", op.boot_id_before):
            return ProviderView(ProviderState.SUCCEEDED)
        return ProviderView(ProviderState.RUNNING)

    def _replace_progress(self, op: Operation, node: str, pool: str, ref: MachineRef,
                          machine: dict[str, Any] | None, lookup: NodeLookup) -> ProviderView:
        current = lookup(node)
        if current is not None:
            self._claims.since(op, current)
        if machine is not None:
            meta = machine.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                return ProviderView(ProviderState.RUNNING,
                                    f"Cluster API is deleting Machine {ref.namespace}/{ref.name}")
            started = (meta.get("annotations") or {}).get(self._names.operation_annotation) == op.id
            return ProviderView(ProviderState.RUNNING if started else ProviderState.NOT_STARTED)
        mine = self._claims.claimed_by(op, self._kube.list_nodes(f"{self._names.pool_label}={pool}"))
        new = str((mine or {}).get("metadata", {}).get("name", ""))
        if current is not None:
            return ProviderView(ProviderState.RUNNING, (
                f"Machine {ref.namespace}/{ref.name} is gone but node {node} still exists: waiting for it to be "
                "deleted (Cluster API gives up after the Machine's nodeDeletionTimeout; then delete the node)"),
                new_node=new)
        if mine is None:
            return ProviderView(ProviderState.RUNNING, (
                f"Machine {ref.namespace}/{ref.name} and node {node} are gone: waiting for a new Ready node of "
                f"pool {pool} (label {self._names.pool_label}={pool}) from a Machine in {ref.namespace}"))
        self._claims.forget(op)
        return ProviderView(ProviderState.SUCCEEDED, new_node=new)


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return ClusterApiProvider(c.kube, c.clock, c.names, version=str(s["version"]))


KIND = ProviderKind(
    "clusterapi", (RepairAction.RESET.value, RepairAction.REPLACE.value),
    "Cluster API: replace deletes the node's Machine; reset sets its remediation annotation.",
    (Setting("version", "enum", "The Cluster API version of the Machine objects (the other "
             "one when the cluster does not serve it).",
             default=CLUSTERAPI_VERSIONS[0], values=tuple(sorted(CLUSTERAPI_VERSIONS))),),
    rules=(Rule("cluster.x-k8s.io", "machines", ("get", "patch", "delete")),),
    build=_build)
