"""The simulated provider: resets and replaces kwok nodes on the local cluster.

It plays a provider, not the hardware: like a real one it asks once and then watches the
node. Everything it has done is recorded on the node itself (``sim.autoclusters.io/*``
annotations), so the operation survives a controller restart: ``drive`` reads the record
first and only moves it forward. In the controller it reads the node from the controller's
informer cache (no request; its own writes go into the cache at once), elsewhere from the API.

- reset: one node patch records the operation and asks the simulated host to reboot until
  ``reset_seconds`` from now (``sim.hosts.reboot_request``);
  kwok's stages (``sim/kwok-stages.yaml``) play the reboot: NotReady, then at that time Ready
  with a new ``bootID`` and the request removed, as a VM's kubelet reports after a reset.
  Done when the request is gone and the boot id differs from ``Operation.boot_id_before``
  (the boot id the controller saw when it began the operation, kept in the repair record, as
  every provider reads it; nothing else needs it, so the node does not carry a copy).
- replace: after ``replace_seconds`` a node with a name derived from the operation id joins
  the pool with the old node's labels and shape, then the old node is deleted.
- ``sim.autoclusters.io/fail-reset: "true"`` / ``fail-replace: "true"`` on a node make the
  next operation of that kind fail, for tests of the failure paths.
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import timedelta
from typing import Any

from autoclusters import api
from autoclusters.api import RepairAction
from autoclusters.clock import Clock, parse_iso, utc_iso_micro
from autoclusters.kube import Conflict, Kube, NotFound
from autoclusters.names import Names
from autoclusters.providers.base import NodeCache, NodeLookup, read_node
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from autoclusters.sim import nodes as sim
from autoclusters.sim.hosts import REBOOT, reboot_request

PREFIX = "sim.autoclusters.io"
ANN_OPERATION = f"{PREFIX}/operation"
ANN_STARTED = f"{PREFIX}/operation-started"
ANN_FAILED = f"{PREFIX}/operation-failed"
ANN_FAIL_RESET = f"{PREFIX}/fail-reset"
ANN_FAIL_REPLACE = f"{PREFIX}/fail-replace"


def _annotations(node: dict[str, Any] | None) -> dict[str, str]:
    return ((node or {}).get("metadata") or {}).get("annotations") or {}


def _boot_id(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


class SimulatedProvider:
    name = "simulated"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, reset_seconds: float = api.SIM_RESET_SECONDS,
                 replace_seconds: float = api.SIM_REPLACE_SECONDS, nodes: NodeCache | None = None) -> None:
        self._kube = kube
        self._clock = clock
        self._names = names
        self.reset_seconds = reset_seconds
        self.replace_seconds = replace_seconds
        self._nodes = nodes  # the controller's cache: drive reads the node there, not from the API

    def _read(self, node: str) -> dict[str, Any] | None:
        return read_node(node, self._nodes, self._kube)

    def _wrote(self, obj: dict[str, Any]) -> None:
        if self._nodes is not None and obj.get("metadata", {}).get("name"):
            self._nodes.written(obj)

    def _patch(self, node: str, annotations: dict[str, str | None]) -> None:
        self._wrote(self._kube.patch_node(node, {"metadata": {"annotations": annotations}}))

    def _patch_status(self, node: str, status: dict[str, Any]) -> None:
        self._wrote(self._kube.patch_node_status(node, {"status": status}))

    def refusal(self, node: dict[str, Any] | None) -> str:
        """Only nodes the local simulator manages: this provider fakes a reset and replaces a
        node by deleting it and creating a fake one, which must never happen to a real machine."""
        if node is None or sim.is_simulated(node):
            return ""
        name = (node.get("metadata") or {}).get("name", "")
        return (f"the simulated provider acts only on nodes the local simulator manages (annotation "
                f"{sim.KWOK_NODE_ANNOTATION}); node {name} is not one: name a real provider in the pool")

    def replacement_name(self, op: Operation, pool: str) -> str:
        """Derived from the operation id, so a retried replacement finds the node it created."""
        return f"{pool}-{hashlib.sha256(op.id.encode()).hexdigest()[:6]}"

    # --- progress -----------------------------------------------------------------------
    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        current = lookup(node)
        ann = _annotations(current)
        if current is not None and ann.get(ANN_FAILED) == op.id:
            return ProviderView(ProviderState.FAILED, f"simulated {op.action} failure requested on {node}")
        if op.action == RepairAction.RESET:
            if current is None:
                return ProviderView(ProviderState.FAILED, f"node {node} disappeared during the reset")
            if ann.get(ANN_OPERATION) != op.id:
                return ProviderView(ProviderState.NOT_STARTED)
            if REBOOT not in ann and _boot_id(current) != op.boot_id_before:
                return ProviderView(ProviderState.SUCCEEDED)
            # the reset's end shows on the node (kwok's stages reboot it: a new boot id, the
            # reboot annotations removed), which wakes the controller: nothing to poll
            return ProviderView(ProviderState.RUNNING, shows_on_node=True)
        new = self.replacement_name(op, pool)
        if current is None and lookup(new) is not None:
            return ProviderView(ProviderState.SUCCEEDED, new_node=new)
        if current is not None and ann.get(ANN_OPERATION) == op.id:
            return ProviderView(ProviderState.RUNNING, new_node=new,
                                next_check=self._remaining(current, self.replace_seconds))
        return ProviderView(ProviderState.NOT_STARTED, new_node=new)

    # --- drive --------------------------------------------------------------------------
    def drive(self, op: Operation, node: str, pool: str) -> None:
        current = self._read(node)
        if op.action == RepairAction.RESET:
            if current is not None:
                self._drive_reset(op, current)
            return
        self._drive_replace(op, node, pool, current)

    def _mark_started(self, node: str, op: Operation, extra: dict[str, str | None]) -> None:
        self._patch(node, {ANN_OPERATION: op.id, ANN_STARTED: utc_iso_micro(self._clock.now()), ANN_FAILED: None,
                           **extra})

    def _remaining(self, node: dict[str, Any], seconds: float) -> float:
        started = parse_iso(_annotations(node).get(ANN_STARTED))
        if started is None:
            return 0.0
        return max(0.0, (started + timedelta(seconds=seconds) - self._clock.now()).total_seconds())

    def _due(self, node: dict[str, Any], seconds: float) -> bool:
        started = parse_iso(_annotations(node).get(ANN_STARTED))
        return started is None or self._clock.now() >= started + timedelta(seconds=seconds)

    def _drive_reset(self, op: Operation, node: dict[str, Any]) -> None:
        """One request: the operation and the reboot, in one node patch.
        Started (or failed) already: the simulated host does the rest."""
        name = node["metadata"]["name"]
        if _annotations(node).get(ANN_OPERATION) == op.id:
            return
        if _annotations(node).get(ANN_FAIL_RESET) == "true":
            self._patch(name, {ANN_OPERATION: op.id, ANN_FAILED: op.id})
            return
        until = self._clock.now() + timedelta(seconds=self.reset_seconds)
        self._mark_started(name, op, {**reboot_request(op.id, until)})

    def _drive_replace(self, op: Operation, node: str, pool: str, current: dict[str, Any] | None) -> None:
        new = self.replacement_name(op, pool)
        if current is not None:
            ann = _annotations(current)
            if ann.get(ANN_FAILED) == op.id:
                return
            if ann.get(ANN_OPERATION) != op.id:
                if ann.get(ANN_FAIL_REPLACE) == "true":
                    self._patch(node, {ANN_OPERATION: op.id, ANN_FAILED: op.id})
                    return
                self._mark_started(node, op, {})
                if self.replace_seconds > 0:
                    return
            elif not self._due(current, self.replace_seconds):
                return
        self._create_replacement(new, pool, current)
        if current is not None:
            with contextlib.suppress(NotFound):
                self._kube.delete(f"/api/v1/nodes/{node}")
            if self._nodes is not None:
                self._nodes.deleted(node)

    def _create_replacement(self, new: str, pool: str, old: dict[str, Any] | None) -> None:
        labels = ((old or {}).get("metadata") or {}).get("labels") or {}
        capacity = ((old or {}).get("status") or {}).get("capacity") or {}
        base = sim.A100_8X
        shape = sim.GpuShape(
            instance_type=labels.get(sim.INSTANCE_TYPE_LABEL, base.instance_type),
            product=labels.get(sim.GPU_PRODUCT_LABEL, base.product),
            gpus=int(labels.get(sim.GPU_COUNT_LABEL, base.gpus)),
            cpu=str(capacity.get("cpu", base.cpu)), memory=str(capacity.get("memory", base.memory)),
            pods=str(capacity.get("pods", base.pods)))
        pool_name = labels.get(self._names.pool_label, pool)
        keep = {k: v for k, v in labels.items()
                if not k.startswith(self._names.domain + "/") and not k.startswith("kubernetes.io/")}
        manifest = sim.gpu_node_manifest(new, pool_name, self._names, shape, labels=keep)
        manifest["metadata"]["labels"]["kubernetes.io/hostname"] = new
        with contextlib.suppress(Conflict):
            self._kube.create("/api/v1/nodes", manifest)
        self._patch_status(new, manifest["status"])
