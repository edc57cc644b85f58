"""What one whole repair asks of the API server, pinned: a request added anywhere on the path
fails here (docs/benchmarks/controller.md, "Requests of one repair", lists them and why each
one is needed).

The repair is an automatic reset through the simulated provider, from the fault condition to
the record Succeeded and the node clean; requests are counted by verb and resource at the
transport, as the benchmark counts them. Three shares are told apart: the controller's own,
the simulated provider's, and the pool's status (written when its faulty count changes; shared
by all repairs of a burst). Per pod on the node come three more (its warning, its event, its
eviction), counted apart.

The provider's share is one node patch, where a real provider makes one call to its backend
(reset the VM): the simulated provider asks the simulated host to reboot, and the host (kwok's
stages on the local cluster, the harness's ``KwokReboots`` here) posts the node's status as a
VM's kubelet would, which is not a request of the controller process. The harness's detector
writes the fault and clears it, also not the controller's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.unit.controller.harness import NAMES, Harness
from tests.unit.fakeapi import Request

SIM = "sim.autoclusters.io/"


def share(r: Request) -> str:
    if r.resource == "gpunodepools/status":
        return "pool"
    if r.resource == "nodes" and r.verb == "PATCH" and isinstance(r.body, dict) and all(
            k.startswith(SIM) for k in ((r.body.get("metadata") or {}).get("annotations") or {})):
        return "provider"
    if r.resource.startswith("pods") or (r.resource == "events" and isinstance(r.body, dict)
                                         and r.body["involvedObject"]["kind"] == "Pod"):
        return "per pod" if r.verb != "LIST" else "controller"
    return "controller"


def by_share(h: Harness) -> dict[str, Counter[tuple[str, str]]]:
    out: dict[str, Counter[tuple[str, str]]] = {}
    for r in h.api.requests:
        if r.verb != "WATCH":
            out.setdefault(share(r), Counter())[(r.verb, r.resource)] += 1
    return out


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    harness.pool()
    harness.node("n1")
    harness.node("n2")
    yield harness
    harness.stop()


CONTROLLER = Counter({
    ("LIST", "pods"): 1,  # the drain's list: is there anything to evict
    ("POST", "remediations"): 1,  # the record (its status cannot be written with it: a subresource)
    ("PATCH", "remediations/status"): 3,  # Acting (Scheduled and Draining in the same write), Verifying, Succeeded
    ("PATCH", "nodes"): 2,  # marked + cordoned + warned in one patch; unmarked + uncordoned in one
    ("POST", "events"): 5,  # Required, Scheduled, Started, DrainWarning, Succeeded: the contract's events
})
PROVIDER = Counter({("PATCH", "nodes"): 1})  # the reset asked for: operation, reboot
POOL = Counter({("PATCH", "gpunodepools/status"): 2})  # one faulty node more, one less


def by_component(h: Harness, before: dict[tuple[str, str, str], int]) -> dict[str, int]:
    """The client's own count (what the controller's metric exports), without watches."""
    out: Counter[str] = Counter()
    for (component, verb, _), n in h.kube.requests.snapshot().items():
        if verb != "watch":
            out[component] += n - before.get((component, verb, _), 0)
    return {c: n for c, n in out.items() if n}


def test_one_whole_auto_repair_costs_twelve_requests_of_the_controller(h: Harness) -> None:
    h.start()
    h.run()
    h.api.requests.clear()
    before = h.kube.requests.snapshot()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=30)  # and whatever follows it (the pool's status, requeues)
    assert h.phase("n1") == "Succeeded"
    shares = by_share(h)
    assert shares["controller"] == CONTROLLER and sum(CONTROLLER.values()) == 12
    assert shares["provider"] == PROVIDER
    assert shares["pool"] == POOL
    assert "per pod" not in shares
    assert not any(r.verb == "GET" for r in h.api.requests)  # the cache answers every read
    # the metric's component label tells the same shares apart at the client
    assert by_component(h, before) == {"controller": 12 + 2, "provider/simulated": sum(PROVIDER.values())}


def test_each_pod_adds_its_warning_its_event_and_its_eviction(h: Harness) -> None:
    h.pod("n1", "a")
    h.pod("n1", "b")
    h.start()
    h.run()
    h.api.requests.clear()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    h.run(seconds=30)
    shares = by_share(h)
    assert shares["per pod"] == Counter({("PATCH", "pods"): 2, ("POST", "events"): 2, ("POST", "pods/eviction"): 2})
    # the drain takes one more look (pods gone?) and the record shows Draining before Acting
    assert shares["controller"] == CONTROLLER + Counter({("LIST", "pods"): 1, ("PATCH", "remediations/status"): 1})


def test_a_starting_repair_is_one_node_patch(h: Harness) -> None:
    """docs/workflow.md: the label, the taint, the cordon and the warning's annotations go in one
    JSON patch when a repair starts."""
    h.start()
    h.run()
    h.api.requests.clear()
    h.fault("n1")
    h.step()  # the one reconcile that decides, starts and drains (the node has no pods) the repair
    assert h.phase("n1") == "Acting"
    ours = [r for r in h.api.requests if r.resource == "nodes" and share(r) == "controller"]
    assert [r.verb for r in ours] == ["PATCH"] and ours[0].content_type == "application/json-patch+json"
    node = h.node_obj("n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"][NAMES.maintenance_required] == "true"
    assert node["metadata"]["annotations"][NAMES.remediation] == h.records("n1")[0]["metadata"]["name"]
    assert [t["key"] for t in node["spec"]["taints"]] == [NAMES.taint_key]


def test_a_karpenter_node_without_annotations_gets_guards_and_warning_in_the_same_patch() -> None:
    from autoclusters.clock import FakeClock
    from autoclusters.controller.actuator import Actuator
    from autoclusters.controller.statemachine import EnsureMarked, Warn
    from autoclusters.providers.karpenter import GUARD_ANNOTATIONS, NODEPOOL_LABEL
    from tests.unit.controller.harness import Notes
    from tests.unit.controller.test_actuator_predrain import _state, deadline_of
    from tests.unit.fakeapi import FakeApi

    api = FakeApi()
    kube = api.kube()
    node = api.put("/api/v1/nodes", {"metadata": {"name": "n1", "labels": {NODEPOOL_LABEL: "gpu"}}, "spec": {}})
    s = _state()
    warn = Warn(deadline_of(s), "why", slinky=True)
    act = Actuator(kube, NAMES, None, Notes(), FakeClock())  # type: ignore[arg-type]  # no event here
    out = act.run((EnsureMarked(cordon=True, warning=warn),), "n1", node, s, None)
    assert [(r.verb, r.resource) for r in api.requests] == [("PATCH", "nodes")]
    ann = (out or {})["metadata"]["annotations"]
    assert all(ann[k] == "true" for k in GUARD_ANNOTATIONS) and ann[NAMES.remediation] == s.name
    assert (out or {})["spec"]["unschedulable"] is True


@pytest.mark.parametrize("reset_seconds", [5.0, 300.0])
def test_the_looks_of_a_reset_do_not_grow_with_its_length(reset_seconds: float) -> None:
    """A reset's progress and its verification show on the node (the simulated reset's end is
    the host's reboot; a verified node is Ready, on a new boot, without the fault), so the
    controller looks when the node changes, not every --poll-seconds: a reset of 5 minutes
    costs the same reconciles as one of 5 seconds (with 2 s polls it cost 150 more)."""
    h = Harness(sim_seconds=reset_seconds)
    try:
        h.pool()
        h.node("n1")
        h.start()
        h.run()
        h.fault("n1")
        keys = h.run(lambda: h.phase("n1") == "Succeeded", seconds=reset_seconds + 120)
        assert h.phase("n1") == "Succeeded"
        # the start (the node marked, the provider asked), the provider's own write, the host
        # back up on a new boot (Verifying: the fault is still reported), the fault cleared
        # (Succeeded); with a 2 s poll the 5 s reset took 6 and the 5 minute one 153
        assert keys.count("n1") == 4, keys
    finally:
        h.stop()
