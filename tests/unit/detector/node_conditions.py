"""The detector's nodes in the one fake API server (``tests/unit/fakeapi.py``), as its tests
read and break them: the node conditions the real client wrote (strategic merge by ``type``,
the API server's), the status patches that landed, the nodes read, and a node whose writes
fail (503) or hang until a test lets them through."""

from __future__ import annotations

import threading
from typing import Any

from autoclusters.kube import Kube
from tests.unit.builders import node
from tests.unit.fakeapi import ApiError, FakeApi, Request

NODES = "/api/v1/nodes"


class NodeConditions:
    def __init__(self, nodes: list[str]) -> None:
        self.api = FakeApi()
        for name in nodes:
            self.api.put(NODES, node(name, pool="", detected=False))
        self.kube: Kube = self.api.kube()
        self.fail: set[str] = set()  # nodes whose writes answer 503
        self.hang: dict[str, threading.Event] = {}  # nodes whose writes wait (5 s at most) for their event
        self.patches: list[tuple[str, dict[str, Any]]] = []  # (node, body) of the status writes that landed
        self._lock = threading.Lock()
        self.api.on_request("PATCH", NODES, self._write)

    def _write(self, req: Request) -> None:
        name = req.path.split("/")[4]
        if name in self.hang:
            self.hang[name].wait(5)
        if name in self.fail:
            raise ApiError(503, "injected failure")
        if self.api.read(f"{NODES}/{name}") is not None:
            with self._lock:
                self.patches.append((name, req.body))

    @property
    def gets(self) -> list[str]:
        """The nodes read, in order (one per GET)."""
        return [r.path.split("/")[4] for r in self.api.requests if r.verb == "GET" and r.path.startswith(NODES + "/")]

    def find_condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        stored = self.api.read(f"{NODES}/{name}") or {}
        return next((c for c in (stored.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)

    def condition(self, name: str, ctype: str) -> dict[str, Any]:
        """The node's condition of that type; a missing one fails the test."""
        found = self.find_condition(name, ctype)
        assert found is not None, f"{name} has no {ctype} condition"
        return found
