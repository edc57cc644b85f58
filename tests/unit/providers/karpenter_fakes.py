"""A small stand-in for the ``Kube`` facade holding nodes and Karpenter NodeClaims, with the
API server's behaviour the Karpenter provider relies on: a deleted NodeClaim keeps a
deletionTimestamp until "Karpenter" finishes it (its finalizer), JSON patches are applied
with their ``test`` operations, and a stale resourceVersion loses."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Self

from autoclusters.clock import utc_iso
from autoclusters.kube import Conflict, NotFound
from autoclusters.kube.objects import selector_matches

JSON = dict[str, Any]


def _unpointer(seg: str) -> str:
    return seg.replace("~1", "/").replace("~0", "~")


def apply_json_patch(obj: JSON, ops: list[JSON]) -> JSON:
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [_unpointer(s) for s in op["path"].lstrip("/").split("/")]
        target: Any = out
        for seg in parents:
            target = target[int(seg)] if isinstance(target, list) else target[seg]
        if op["op"] == "test":
            got = target[int(last)] if isinstance(target, list) else target.get(last)
            if got != op["value"]:
                raise Conflict(f"test of {op['path']} failed", status=422)
        elif op["op"] == "add":
            if isinstance(target, list):
                target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
            else:
                target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return out


def _merge(base: JSON, patch: JSON) -> JSON:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class FakeKarpenterKube:
    def for_component(self, component: str) -> Self:  # one fake serves every part of the controller
        return self

    def __init__(self) -> None:
        self.nodes: dict[str, JSON] = {}
        self.claims: dict[str, JSON] = {}
        self._rv = 0
        self.deleted_claims: list[str] = []

    def _bump(self, obj: JSON) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    # --- building the world ------------------------------------------------------------
    def add_karpenter_node(self, name: str, nodepool: str, created: datetime, labels: dict[str, str] | None = None,
                           ready: bool = True) -> None:
        claim = f"{nodepool}-{name}"
        node = {"metadata": {"name": name, "creationTimestamp": utc_iso(created),
                             "labels": {"karpenter.sh/nodepool": nodepool, **(labels or {})}},
                "spec": {"providerID": f"kwok://{name}"},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        self._bump(node)
        self.nodes[name] = node
        self.claims[claim] = {"metadata": {"name": claim, "labels": {"karpenter.sh/nodepool": nodepool},
                                           "finalizers": ["karpenter.sh/termination"]},
                              "status": {"nodeName": name, "providerID": f"kwok://{name}"}}

    def karpenter_finishes(self, claim: str) -> None:
        """Karpenter's termination: the node, then the NodeClaim, are gone."""
        node = self.claims[claim]["status"]["nodeName"]
        self.nodes.pop(node, None)
        self.claims.pop(claim)

    # --- the Kube facade ---------------------------------------------------------------
    def list_items(self, path: str, **_: Any) -> list[JSON]:
        assert path == "/apis/karpenter.sh/v1/nodeclaims", path
        return [copy.deepcopy(c) for c in self.claims.values()]

    def get(self, path: str) -> JSON:
        name = path.rsplit("/", 1)[1]
        if name not in self.claims:
            raise NotFound(f"nodeclaims {name} not found", status=404)
        return copy.deepcopy(self.claims[name])

    def patch(self, path: str, body: JSON, *_: Any, **__: Any) -> JSON:
        name = path.rsplit("/", 1)[1]
        if name not in self.claims:
            raise NotFound(f"nodeclaims {name} not found", status=404)
        self.claims[name] = _merge(self.claims[name], body)
        return copy.deepcopy(self.claims[name])

    def delete(self, path: str, *_: Any, **__: Any) -> JSON:
        name = path.rsplit("/", 1)[1]
        if name not in self.claims:
            raise NotFound(f"nodeclaims {name} not found", status=404)
        self.claims[name]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.deleted_claims.append(name)
        return copy.deepcopy(self.claims[name])

    def get_node(self, name: str) -> JSON:
        if name not in self.nodes:
            raise NotFound(f"nodes {name} not found", status=404)
        return copy.deepcopy(self.nodes[name])

    def list_nodes(self, label_selector: str | None = None) -> list[JSON]:
        exprs = []
        for part in (label_selector or "").split(","):
            if not part:
                continue
            if "=" in part:
                k, v = part.split("=", 1)
                exprs.append({"key": k, "operator": "In", "values": [v]})
            else:
                exprs.append({"key": part, "operator": "Exists"})
        return [copy.deepcopy(n) for n in self.nodes.values()
                if selector_matches({"matchExpressions": exprs}, n["metadata"].get("labels") or {})]

    def patch_node_guarded(self, node: JSON, ops_for: Any, **_: Any) -> JSON:
        name = node["metadata"]["name"]
        for _attempt in range(5):
            ops = ops_for(node)
            if not ops:
                return node
            if name not in self.nodes:
                raise NotFound(f"nodes {name} not found", status=404)
            test = {"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]}
            try:
                new = apply_json_patch(self.nodes[name], [test, *ops])
            except Conflict:
                node = self.get_node(name)
                continue
            self._bump(new)
            self.nodes[name] = new
            return copy.deepcopy(new)
        raise Conflict("lost")
