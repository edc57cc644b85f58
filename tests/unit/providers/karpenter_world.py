"""Karpenter's part in a replacement, played against the fake API server (``FakeApi``): its
nodes and NodeClaims, a deleted NodeClaim that keeps its deletionTimestamp (its finalizer)
until "Karpenter" finishes it, and the node going with it. The provider talks to the API
through the real client (``world.kube``); JSON patches, their ``test`` operations and a stale
resourceVersion are the fake API server's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from autoclusters.clock import FakeClock, utc_iso
from autoclusters.kube import Kube
from autoclusters.providers.karpenter import NODEPOOL_LABEL, nodeclaims_path
from tests.unit import builders
from tests.unit.fakeapi import FakeApi

JSON = dict[str, Any]
NODES = "/api/v1/nodes"


class KarpenterWorld:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.api = FakeApi(clock=(clock or FakeClock()).now)
        self.kube: Kube = self.api.kube()

    # --- building the world ------------------------------------------------------------
    def add_karpenter_node(self, name: str, nodepool: str, created: datetime, labels: dict[str, str] | None = None,
                           ready: bool = True) -> None:
        self.api.put(NODES, builders.node(name, pool="", detected=False, ready=ready,
                                          labels={NODEPOOL_LABEL: nodepool, **(labels or {})},
                                          provider_id=f"kwok://{name}", created=utc_iso(created)))
        self.api.put(nodeclaims_path(), builders.nodeclaim(f"{nodepool}-{name}", nodepool, name))

    def add_node(self, node: JSON) -> None:
        self.api.put(NODES, node)

    def karpenter_finishes(self, claim: str) -> None:
        """Karpenter's termination: the node, then the NodeClaim, are gone."""
        node = (self.claim(claim) or {})["status"]["nodeName"]
        if self.node(node) is not None:
            self.api.remove(f"{NODES}/{node}")
        self.api.remove(nodeclaims_path(claim))

    def edit_node(self, name: str, change: Callable[[JSON], object]) -> None:
        self.api.edit(f"{NODES}/{name}", change)

    # --- reading it ----------------------------------------------------------------------
    def node(self, name: str) -> JSON | None:
        return self.api.read(f"{NODES}/{name}")

    @property
    def nodes(self) -> dict[str, JSON]:
        return {n["metadata"]["name"]: n for n in self.api.items(NODES)}

    def claim(self, name: str) -> JSON | None:
        return self.api.read(nodeclaims_path(name))

    @property
    def deleted_claims(self) -> list[str]:
        """The NodeClaims the provider deleted, in order."""
        return [r.path.rsplit("/", 1)[1] for r in self.api.requests
                if r.verb == "DELETE" and r.path.startswith(nodeclaims_path() + "/")]
