"""A stand-in for the ``Kube`` facade (dicts in, dicts out) that applies strategic-merge
condition patches the way the API server does for ``status.conditions`` (merge key
``type``) and can be told to fail, hang or report nodes missing."""

from __future__ import annotations

import copy
import threading
from typing import Any

from autoclusters.kube.errors import NotFound, Unavailable


class FakeKube:
    def __init__(self, nodes: list[str]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            n: {"metadata": {"name": n}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}}
            for n in nodes}
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.gets: list[str] = []
        self.fail: set[str] = set()
        self.hang: dict[str, threading.Event] = {}
        self.created: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def get_node(self, name: str, *, timeout: float = 30) -> dict[str, Any]:
        self.gets.append(name)
        if name not in self.nodes:
            raise NotFound(f"nodes {name} not found", status=404)
        return copy.deepcopy(self.nodes[name])

    def patch_node_status(self, name: str, body: dict[str, Any], patch_type: str = "", *,
                          timeout: float = 30) -> dict[str, Any]:
        if name in self.hang:
            self.hang[name].wait(5)
        if name in self.fail:
            raise Unavailable("injected failure")
        if name not in self.nodes:
            raise NotFound(f"nodes {name} not found", status=404)
        with self._lock:
            self.patches.append((name, copy.deepcopy(body)))
            conds = self.nodes[name]["status"]["conditions"]
            for c in body["status"]["conditions"]:
                for i, old in enumerate(conds):
                    if old["type"] == c["type"]:
                        conds[i] = {**old, **c}
                        break
                else:
                    conds.append(dict(c))
        return copy.deepcopy(self.nodes[name])

    def create(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.created.append(body)
        return body

    def find_condition(self, node: str, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.nodes[node]["status"]["conditions"] if c["type"] == ctype), None)

    def condition(self, node: str, ctype: str) -> dict[str, Any]:
        """The node's condition of that type; a missing one fails the test."""
        found = self.find_condition(node, ctype)
        assert found is not None, f"{node} has no {ctype} condition"
        return found
