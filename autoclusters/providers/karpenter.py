"""The Karpenter provider: replaces a node by deleting its Karpenter NodeClaim.

- replace: after the drain, delete the NodeClaim whose ``status.nodeName`` (or
  ``status.providerID``) is the node. Karpenter terminates the instance and removes the
  node; the pods the drain evicted are Pending again, and their demand makes Karpenter
  launch a new NodeClaim in the NodePool. Success = the old node is gone and a new Ready
  node of the same NodePool, carrying the autoclusters pool label, is matched to this
  operation; failure = not both within ``timeout_seconds``.
- reset: Karpenter has no user-facing reboot; a pool that resets its Karpenter nodes names
  another provider for the reset (a reset asked of this one fails with that explanation).

How a pool's size is tracked: one for one. Each replacement claims exactly one new node
(a node of the NodePool created after the old node was marked for repair, Ready, not under
maintenance and not claimed by another operation) by writing the operation id on it with a patch that
tests the node's resourceVersion, so two concurrent replacements never count the same new
node. The pool is back to its size when every replaced node has its match. When nothing is
Pending (the drained node ran no pods, or they found room elsewhere), Karpenter launches
nothing, no node can be matched and the operation fails at its timeout with a message that
says so: Karpenter sizes a NodePool by its pods, and autoclusters does not create demand.

What it reads: nodes from the controller's cache when it is given one (``NodeCache``; the API
otherwise, for a caller without one); the node's NodeClaim once (the one its ownerReferences
name, as Karpenter registers a node, else from the list of NodeClaims); after the deletion,
nothing more of the NodeClaim (a deletion cannot be undone). So the polls while Karpenter
works ask the API server nothing, and a replacement's requests do not grow with its length.

Everything the provider did is recorded in the cluster (the operation id on the NodeClaim
before its deletion, on the new node when it is claimed), so a restarted controller finds
the operation where it left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.clock import Clock
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.providers.base import BuildContext, NodeCache, NodeLookup, Provider, ProviderError, read_node
from autoclusters.providers.declaration import NodeGuard, ProviderKind, Rule, Setting
from autoclusters.providers.replacement import ReplacementClaims
from autoclusters.providers.types import Operation, ProviderState, ProviderView

KARPENTER_GROUP = "karpenter.sh"
KARPENTER_VERSION = "v1"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
# Karpenter's own annotations: voluntary disruption (consolidation, drift) and, separately,
# its node repair (which do-not-disrupt does not stop) leave the node alone.
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DO_NOT_REPAIR = "karpenter.sh/do-not-repair"
GUARD_ANNOTATIONS = (DO_NOT_DISRUPT, DO_NOT_REPAIR)
DEFAULT_TIMEOUT_SECONDS = 900.0

JSON = dict[str, Any]


def nodeclaims_path(name: str | None = None) -> str:
    return Kube.custom_path(KARPENTER_GROUP, KARPENTER_VERSION, "nodeclaims", name)


def _meta(obj: JSON | None) -> JSON:
    return (obj or {}).get("metadata") or {}


def claim_of(node: str, provider_id: str, claims: list[JSON]) -> JSON | None:
    """The NodeClaim that launched ``node``: its status names the node or its providerID."""
    for c in claims:
        st = c.get("status") or {}
        if st.get("nodeName") == node or (provider_id and st.get("providerID") == provider_id):
            return c
    return None


@dataclass(frozen=True)
class Target:
    """What the provider remembers of the node it replaces (it is gone afterwards)."""

    claim: str
    nodepool: str


class KarpenterProvider:
    name = "karpenter"

    def __init__(self, kube: Kube, clock: Clock, names: Names, *,
                 timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, nodes: NodeCache | None = None) -> None:
        if timeout_seconds <= 0:
            raise ProviderError("provider.timeoutSeconds must be positive")
        self._kube = kube
        self._clock = clock
        self._names = names
        self.timeout_seconds = timeout_seconds
        self._nodes = nodes  # the controller's cache: nodes are read there, not from the API
        self._targets: dict[str, Target] = {}  # node -> its NodeClaim, remembered before it goes away
        self._going: set[str] = set()  # NodeClaims seen deleted or being deleted: that cannot be undone
        self._claims = ReplacementClaims(kube, names)

    @property
    def operation_annotation(self) -> str:
        return self._claims.operation_annotation

    @property
    def replaces_annotation(self) -> str:
        return self._claims.replaces_annotation

    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""  # Karpenter names the new node; progress reports it once claimed

    def refusal(self, node: JSON | None) -> str:
        """A node Karpenter did not launch (no NodePool label) has no NodeClaim to delete."""
        if node is not None and NODEPOOL_LABEL not in (_meta(node).get("labels") or {}):
            return (f"node {_meta(node).get('name', '')} has no {NODEPOOL_LABEL} label: Karpenter did not "
                    "launch it, so the karpenter provider cannot replace it")
        return ""

    # --- lookups ---------------------------------------------------------------------
    def _node(self, name: str) -> JSON | None:
        return read_node(name, self._nodes, self._kube)

    def _target(self, node: str, node_obj: JSON | None) -> tuple[Target | None, JSON | None]:
        """The node's NodeClaim, remembered; and the claim itself when this call just read it.

        Karpenter names the NodeClaim in the node's ownerReferences when the node registers: that
        one is read (and checked: its status must name the node); a node without the reference
        (or whose claim does not name it) costs a list of every NodeClaim."""
        if node in self._targets:
            return self._targets[node], None
        provider_id = str(((node_obj or {}).get("spec") or {}).get("providerID", ""))
        claim = None
        owner = next((r.get("name") for r in _meta(node_obj).get("ownerReferences") or []
                      if r.get("kind") == "NodeClaim"
                      and str(r.get("apiVersion", "")).startswith(f"{KARPENTER_GROUP}/")), None)
        if owner:
            claim = claim_of(node, provider_id, [c] if (c := self._read_claim(str(owner))) is not None else [])
        if claim is None:
            claim = claim_of(node, provider_id, self._kube.list_items(nodeclaims_path()))
        if claim is None:
            return None, None
        t = Target(_meta(claim)["name"], str((_meta(claim).get("labels") or {}).get(NODEPOOL_LABEL, "")))
        self._targets[node] = t
        return t, claim

    def _read_claim(self, name: str) -> JSON | None:
        try:
            return self._kube.get(nodeclaims_path(name))
        except NotFound:
            return None

    def _live_claim(self, name: str, fresh: JSON | None = None) -> JSON | None:
        """The NodeClaim while it exists and is not being deleted (``fresh``: a copy just read).
        Once seen deleted or deleting it is not read again: a deletion cannot be undone, so the
        polls that wait for Karpenter to finish it ask nothing."""
        if name in self._going:
            return None
        claim = fresh if fresh is not None else self._read_claim(name)
        if claim is None or _meta(claim).get("deletionTimestamp"):
            self._going.add(name)
            return None
        return claim

    def _since(self, op: Operation, node_obj: JSON | None) -> datetime:
        return self._claims.since(op, node_obj)

    def _pool_nodes(self, pool: str, nodepool: str) -> list[JSON]:
        """The NodePool's nodes (or, its name unknown after a restart, the pool's Karpenter nodes):
        from the controller's cache when there is one, else listed by label."""
        if self._nodes is not None and self._nodes.items is not None:
            def wanted(labels: dict[str, str]) -> bool:
                if nodepool:
                    return labels.get(NODEPOOL_LABEL) == nodepool
                return NODEPOOL_LABEL in labels and labels.get(self._names.pool_label) == pool

            return [n for n in self._nodes.items() if wanted(_meta(n).get("labels") or {})]
        selector = f"{NODEPOOL_LABEL}={nodepool}" if nodepool else f"{NODEPOOL_LABEL},{self._names.pool_label}={pool}"
        return self._kube.list_nodes(selector)

    def _candidates(self, op: Operation, node: str, nodes: list[JSON]) -> list[JSON]:
        """New nodes of the NodePool (or, after a restart, of the pool) that may replace ``node``."""
        return self._claims.candidates(op, node, nodes)

    def _claimed_by(self, op: Operation, nodes: list[JSON]) -> JSON | None:
        return self._claims.claimed_by(op, nodes)

    # --- drive -----------------------------------------------------------------------
    def drive(self, op: Operation, node: str, pool: str) -> None:
        if op.action != RepairAction.REPLACE:
            return  # progress reports why
        node_obj = self._node(node)
        target, fresh = self._target(node, node_obj) if node_obj is not None or node in self._targets else (None, None)
        if node_obj is not None:
            self._since(op, node_obj)
        if node_obj is not None and target is None:
            return  # not a Karpenter node: progress reports it as the operation's failure
        if target is not None:
            claim = self._live_claim(target.claim, fresh)
            if claim is not None:
                if (_meta(claim).get("annotations") or {}).get(self.operation_annotation) != op.id:
                    self._kube.patch(nodeclaims_path(target.claim),
                                     {"metadata": {"annotations": {self.operation_annotation: op.id}}})
                with contextlib.suppress(NotFound):
                    self._kube.delete(nodeclaims_path(target.claim))
                self._going.add(target.claim)
                return
        self._claim_replacement(op, node, pool, target.nodepool if target else "")

    def _claim_replacement(self, op: Operation, node: str, pool: str, nodepool: str) -> None:
        nodes = self._pool_nodes(pool, nodepool)
        if self._claimed_by(op, nodes) is not None:
            return
        got = self._claims.claim(op, node, pool, self._candidates(op, node, nodes))
        if got is not None and self._nodes is not None:
            self._nodes.written(got)  # the next poll reads the claim from the cache

    # --- progress --------------------------------------------------------------------
    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        if op.action != RepairAction.REPLACE:
            return ProviderView(ProviderState.FAILED,
                                "the karpenter provider only replaces nodes (Karpenter has no reboot request); "
                                "name another provider for the pool's reset")
        current = lookup(node)
        if current is not None:
            self._since(op, current)
        target, fresh = self._targets.get(node), None
        if target is None and current is not None:
            target, fresh = self._target(node, current)
            if target is None:
                return ProviderView(ProviderState.FAILED, f"node {node} has no Karpenter NodeClaim "
                                    "(no NodeClaim's status names it or its providerID)")
        claim = self._live_claim(target.claim, fresh) if target else None
        if claim is not None:
            started = (_meta(claim).get("annotations") or {}).get(self.operation_annotation) == op.id
            return ProviderView(ProviderState.RUNNING if started else ProviderState.NOT_STARTED)
        nodepool = target.nodepool if target else ""
        nodes = self._pool_nodes(pool, nodepool)
        mine = self._claimed_by(op, nodes)
        if mine is not None and current is None:
            self._forget(op, node)
            return ProviderView(ProviderState.SUCCEEDED, new_node=_meta(mine)["name"])
        if self._clock.now() >= op.started + timedelta(seconds=self.timeout_seconds):
            if mine is not None:  # the new node came; the old one never went
                message = (f"{_meta(mine)['name']} replaced {node}, but {node} still exists "
                           f"{int(self.timeout_seconds)}s after its NodeClaim {target.claim if target else ''} was "
                           "deleted: check the NodeClaim's finalizers and Karpenter's logs")
            else:
                message = self._timeout_message(node, pool, nodepool, self._candidates(op, node, nodes))
            self._forget(op, node)
            return ProviderView(ProviderState.FAILED, message)
        # Matched but the old node is still terminating: done only once it is gone, so the pool is
        # back to its size (not one over) and the old node's fault cannot open a new repair.
        return ProviderView(ProviderState.RUNNING, new_node=_meta(mine)["name"] if mine is not None else "")

    def _forget(self, op: Operation, node: str) -> None:
        """The operation ended: what was remembered for it goes (the controller runs for months;
        a later look, should one come, reads again what it needs)."""
        target = self._targets.pop(node, None)
        if target is not None:
            self._going.discard(target.claim)
        self._claims.forget(op)

    def _timeout_message(self, node: str, pool: str, nodepool: str, candidates: list[JSON]) -> str:
        where = f"Karpenter NodePool {nodepool}" if nodepool else f"the Karpenter NodePools of pool {pool}"
        msg = (f"no new Ready node of {where} replaced {node} within {int(self.timeout_seconds)}s of the "
               f"NodeClaim's deletion")
        unlabelled = [_meta(n)["name"] for n in candidates
                      if (_meta(n).get("labels") or {}).get(self._names.pool_label) != pool]
        if unlabelled:
            msg += (f"; new node(s) {', '.join(unlabelled[:3])} lack the label {self._names.pool_label}={pool}: "
                    "add it to the NodePool's spec.template.metadata.labels")
        else:
            msg += ("; Karpenter launches nodes only for Pending pods: check that the evicted pods are Pending, "
                    f"`kubectl get nodeclaims -l {NODEPOOL_LABEL}{'=' + nodepool if nodepool else ''}` and "
                    "Karpenter's logs")
        return msg


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return KarpenterProvider(c.kube, c.clock, c.names, timeout_seconds=float(s["timeoutSeconds"]), nodes=c.nodes)


KIND = ProviderKind(
    "karpenter", (RepairAction.REPLACE.value,),
    "Karpenter: replace deletes the node's NodeClaim after the drain; done when a new Ready node of "
    "the same NodePool (with the pool's label) is matched to the replacement.",
    (Setting("timeoutSeconds", "integer", "The replacement fails when no new Ready node of the "
             "NodePool is matched this long after the operation started (Karpenter launches "
             "nodes only for Pending pods).", minimum=1, default=900),),
    rules=(Rule("karpenter.sh", "nodeclaims", ("get", "list", "patch", "delete")),),
    # a marked Karpenter node is left alone by Karpenter's disruption and its node repair, and gets
    # the time of its marking, from which the replacement counts new nodes
    guards=(NodeGuard(NODEPOOL_LABEL, GUARD_ANNOTATIONS, stamp_marked_at=True),),
    build=_build)
