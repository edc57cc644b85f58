"""What one whole replacement through Karpenter asks of the API server, pinned: the provider's
requests do not grow with the number of polls while Karpenter works, so a slow Karpenter
costs no more than a fast one (docs/benchmarks/controller.md, "Replacements through Karpenter").

The controller's real pieces run against the fake API server (tests/unit/controller/harness.py)
with a stand-in for Karpenter on it: each node has its NodeClaim (named in the node's
ownerReferences, with Karpenter's termination finalizer, as Karpenter registers a node); a
NodeClaim being deleted is finished (the node, then the claim, gone) and a new node of the
NodePool launched after the delays the test gives. The real Karpenter runs in
tests/integration/test_karpenter.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from autoclusters.providers.karpenter import NODEPOOL_LABEL, nodeclaims_path
from autoclusters.sim import nodes as sim
from tests.unit.controller.harness import NAMES, ROW_REMAP_FAILURE, Harness

NODEPOOL = "gpu"


class KarpenterStandIn:
    """Karpenter's part of a replacement, moved on by the harness's loop."""

    def __init__(self, h: Harness, *, terminate_after: float, launch_after: float) -> None:
        self.h = h
        self.terminate_after = terminate_after  # deletion seen -> the old node and its claim gone
        self.launch_after = launch_after  # deletion seen -> the new node Ready
        self._deleting: dict[str, float] = {}  # claim -> when its deletion was first seen
        self.launched: list[str] = []

    def node(self, name: str) -> None:
        claim = f"{NODEPOOL}-{name}"
        stored = self.h.api.put(nodeclaims_path(), {
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": claim, "labels": {NODEPOOL_LABEL: NODEPOOL},
                         "finalizers": ["karpenter.sh/termination"]},
            "status": {"nodeName": name, "providerID": f"kwok://{name}"}})
        manifest = sim.gpu_node_manifest(name, "p", NAMES, labels={NODEPOOL_LABEL: NODEPOOL})
        manifest["metadata"]["ownerReferences"] = [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                                    "name": claim, "uid": stored["metadata"]["uid"]}]
        manifest["spec"]["providerID"] = f"kwok://{name}"
        manifest["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        self.h.api.put("/api/v1/nodes", manifest)

    def step(self) -> None:
        now = self.h.clock.monotonic()
        for claim in self.h.api.items(nodeclaims_path()):
            name = claim["metadata"]["name"]
            if claim["metadata"].get("deletionTimestamp"):
                self._deleting.setdefault(name, now)
        for name, since in list(self._deleting.items()):
            if now >= since + self.launch_after and name not in self.launched:
                self.launched.append(name)
                self.node(f"new-{len(self.launched)}")
            going = self.h.api.read(nodeclaims_path(name))
            if going is not None and now >= since + self.terminate_after:
                self.h.api.remove(f"/api/v1/nodes/{going['status']['nodeName']}")
                self.h.api.remove(nodeclaims_path(name))


class KarpenterHarness(Harness):
    def __init__(self, *, terminate_after: float, launch_after: float) -> None:
        super().__init__()
        self.karpenter = KarpenterStandIn(self, terminate_after=terminate_after, launch_after=launch_after)

    def _detector(self) -> None:
        super()._detector()
        self.karpenter.step()


def harness(terminate_after: float, launch_after: float) -> KarpenterHarness:
    h = KarpenterHarness(terminate_after=terminate_after, launch_after=launch_after)
    h.pool(provider={"reset": {"type": "simulated"}, "replace": {"type": "karpenter"}})
    h.karpenter.node("k1")
    h.karpenter.node("k2")
    h.clock.advance(3600)  # the pool's nodes are an hour old when the fault comes
    return h


def replace_k1(h: KarpenterHarness) -> dict[str, Counter[tuple[str, str]]]:
    """One whole replacement of k1, from the fault to the record Succeeded; the requests it made
    by component, (verb, resource), watches left out: the client's own count."""
    h.start()
    h.run()
    before = h.kube.requests.snapshot()
    h.fault("k1", ROW_REMAP_FAILURE)
    h.run(lambda: h.phase("k1") == "Succeeded", seconds=300)
    h.run(seconds=30)  # and whatever follows it (the pool's status, requeues)
    out: dict[str, Counter[tuple[str, str]]] = {}
    for (component, verb, resource), n in h.kube.requests.snapshot().items():
        if verb != "watch" and n - before.get((component, verb, resource), 0):
            out.setdefault(component, Counter())[(verb, resource)] += n - before.get((component, verb, resource), 0)
    return out


@pytest.fixture
def fast() -> Iterator[KarpenterHarness]:
    h = harness(terminate_after=4, launch_after=6)
    yield h
    h.stop()


# The provider's whole share: the NodeClaim named by the node's owner reference read once,
# the operation id written on it, its deletion; then the new node claimed. Every poll in
# between reads nodes from the controller's cache and knows the deletion cannot be undone.
PROVIDER = Counter({("get", "nodeclaims"): 1, ("patch", "nodeclaims"): 1, ("delete", "nodeclaims"): 1,
                    ("patch", "nodes"): 1})


def test_one_whole_karpenter_replacement_costs_four_requests_of_the_provider(fast: KarpenterHarness) -> None:
    shares = replace_k1(fast)
    assert fast.phase("k1") == "Succeeded"
    record = fast.records("k1")[0]
    assert record["status"]["replacementNode"] == "new-1"
    assert fast.node_obj("k1") is None and fast.api.read(nodeclaims_path("gpu-k1")) is None
    assert shares["provider/karpenter"] == PROVIDER
    assert "provider/simulated" not in shares


def test_a_slow_karpenter_costs_the_provider_no_more_requests() -> None:
    """Ten times as many polls before the new node comes: the same requests."""
    h = harness(terminate_after=40, launch_after=60)
    try:
        shares = replace_k1(h)
        assert h.phase("k1") == "Succeeded"
        assert shares["provider/karpenter"] == PROVIDER
    finally:
        h.stop()
