"""Which new node replaced which old one: one for one, never one node for two repairs.

A provider that replaces a node through an external controller (Karpenter's NodePool, Cluster
API's MachineSet) does not choose the new node: the controller launches one for the pool; nor
does a command provider whose script prints no ``new-node=`` (the reconciler claims one for it
while it verifies the replacement). Each replacement claims exactly one new node (a node of
the pool created after the old node was marked for repair, Ready, not under maintenance, not
claimed by another operation) by writing the operation id on it with a JSON patch that tests
the node's resourceVersion, so two concurrent replacements never count the same new node and
a restarted controller finds the claim where it left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from autoclusters.clock import parse_iso
from autoclusters.kube import Conflict, Kube, NotFound
from autoclusters.kube.json_patch import pointer
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers.types import Operation

JSON = dict[str, Any]


def _meta(obj: JSON | None) -> JSON:
    return (obj or {}).get("metadata") or {}



class ReplacementClaims:
    """The claim annotations and the guarded patch that writes them."""

    def __init__(self, kube: Kube, names: Names) -> None:
        self._kube = kube
        self._names = names
        self._baseline: dict[str, datetime] = {}  # operation id -> when its node was marked

    @property
    def operation_annotation(self) -> str:
        return self._names.operation_annotation

    @property
    def replaces_annotation(self) -> str:
        return f"{self._names.api_group}/replaces"

    def since(self, op: Operation, node_obj: JSON | None) -> datetime:
        """The bound, in whole seconds: nodes created in a later second may replace the node.

        The bound is when the repair marked the node: the evicted pods' demand (or a
        MachineSet's) can bring the new node while the drain is still running, before the
        operation starts. Without the mark (a controller restarted after the old node was gone)
        the operation's start is the bound.

        ``creationTimestamp`` has whole seconds, so a node created in the bound's own second
        may be older than the bound (a node of the pool made just before the repair began):
        such a node is never a replacement. A real replacement comes after an eviction, a
        scheduling pass and a machine's start (Karpenter batches pending pods for a second
        before it launches one), never within the second of the mark.
        """
        if op.id not in self._baseline:
            marked = parse_iso((_meta(node_obj).get("annotations") or {}).get(self._names.marked_at_annotation))
            if node_obj is not None or marked is not None:
                self._baseline[op.id] = min(marked or op.started, op.started)
        return self._baseline.get(op.id, op.started).replace(microsecond=0)  # creationTimestamp: seconds

    def forget(self, op: Operation) -> None:
        """The operation ended: its bound is not needed again (a controller runs for months, and
        one bound per replacement would otherwise stay in memory for good)."""
        self._baseline.pop(op.id, None)

    def candidates(self, op: Operation, node: str, nodes: Iterable[JSON]) -> list[JSON]:
        """Nodes created after the repair began (in a later second than ``since``) that may
        replace ``node``, oldest first."""
        since = self.since(op, None)
        out = []
        for n in nodes:
            meta = _meta(n)
            created = parse_iso(meta.get("creationTimestamp"))
            if meta.get("name") == node or meta.get("deletionTimestamp") or created is None or created <= since:
                continue
            out.append(n)
        return sorted(out, key=lambda n: (_meta(n).get("creationTimestamp", ""), _meta(n)["name"]))

    def claimed_by(self, op: Operation, nodes: Iterable[JSON]) -> JSON | None:
        """The node this operation claimed, if one of ``nodes``."""
        return next((n for n in nodes if (_meta(n).get("annotations") or {}).get(self.operation_annotation) == op.id),
                    None)

    def eligible(self, candidate: JSON, pool: str, in_pool: Callable[[JSON], bool] | None = None) -> bool:
        """Ready, in the pool (by default: labelled for it), not itself under repair, not claimed by anyone."""
        ann = _meta(candidate).get("annotations") or {}
        labels = _meta(candidate).get("labels") or {}
        member = in_pool(candidate) if in_pool is not None else labels.get(self._names.pool_label) == pool
        return (not ann.get(self.operation_annotation) and node_ready(candidate) and member
                and labels.get(self._names.maintenance_required) != "true")

    def claim(self, op: Operation, node: str, pool: str, candidates: Iterable[JSON],
              also: Callable[[JSON], bool] = lambda _n: True,
              in_pool: Callable[[JSON], bool] | None = None) -> JSON | None:
        """Claims the first eligible candidate (``also`` adds the provider's own test; ``in_pool``
        replaces the pool-label test, for a caller that knows the pool's members) for ``op``;
        the claimed node, or None when none could be claimed."""
        for cand in candidates:
            if not self.eligible(cand, pool, in_pool) or not also(cand):
                continue

            def ops_for(current: JSON) -> list[JSON]:
                a = _meta(current).get("annotations")
                if (a or {}).get(self.operation_annotation):
                    return []  # another operation got there first
                value = {self.operation_annotation: op.id, self.replaces_annotation: node}
                if a is None:
                    return [{"op": "add", "path": "/metadata/annotations", "value": value}]
                return [{"op": "add", "path": f"/metadata/annotations/{pointer(k)}", "value": v}
                        for k, v in value.items()]

            with contextlib.suppress(Conflict, NotFound):
                got = self._kube.patch_node_guarded(cand, ops_for)
                if (_meta(got).get("annotations") or {}).get(self.operation_annotation) == op.id:
                    return got
        return None
