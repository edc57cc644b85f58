"""A repair whose first node write fails as it starts: the one patch that marks, cordons and
warns the node on entering Draining is refused. The record is stored already (Draining, or
Acting when there is nothing to drain), so the next reconciles must write the whole marking
again (label, taint, cordon, the warning's node annotations), warn the pods and call the pool's
pre-drain hook, once, before any eviction and before the provider is asked; then the repair
ends as usual and the node is clean (docs/workflow.md, "Act").

Before, the retry asked for a bare cordon while evicting and for nothing at all in Acting (the
node was reset unlabelled, untainted and uncordoned), and the hook was never called: the plan
that would have called it stopped at the refused patch, and only that plan asked for it.

The node's warning (its ``remediation`` annotation naming the record) is what says the hook was
called: it is written by the patch the call follows in the same plan. A restarted controller
reads it from the node, so it neither calls the hook again nor loses the call.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.controller.statemachine import Drain, EnsureMarked
from autoclusters.kube import Unavailable
from autoclusters.names import EVENT_DRAIN_WARNING, EVENT_SUCCEEDED
from autoclusters.sim.hosts import REBOOT
from autoclusters.sim.provider import ANN_OPERATION
from tests.unit.controller.harness import NAMES, Harness
from tests.unit.controller.test_reconciler_failed_writes import _clean, adds_label, fail
from tests.unit.fakeapi import ApiError, Request

JSON = dict[str, Any]
REFUSED = ApiError(500, "etcdserver: request timed out")


def hooked(h: Harness, tmp_path: Path, acknowledgers: tuple[str, ...] = ()) -> Path:
    """The pool's pre-drain hook: a command that appends each payload it gets to a file."""
    calls = tmp_path / "hook-calls.jsonl"
    script = f"import sys; open({str(calls)!r}, 'a').write(sys.stdin.read() + '\\n')"
    h.pool(preDrain={"waitSeconds": 60, "acknowledgers": list(acknowledgers),
                     "hook": {"command": [sys.executable, "-c", script]}})
    return calls


def hook_calls(calls: Path) -> list[JSON]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def fully_marked(node: JSON | None, record: str) -> bool:
    """Label, taint, cordon and the warning's node annotations for ``record``."""
    if node is None:
        return False
    meta, spec = node["metadata"], node.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return (meta.get("labels") or {}).get(NAMES.maintenance_required) == "true" \
        and any(t["key"] == NAMES.taint_key for t in spec.get("taints") or []) \
        and spec.get("unschedulable") is True \
        and annotations.get(NAMES.remediation) == record \
        and bool(annotations.get(NAMES.drain_deadline)) and bool(annotations.get(NAMES.drain_reason))


def warned_once(h: Harness, calls: Path, record: str, moments: list[tuple[str, JSON | None, int]],
                pods: int) -> JSON:
    """The pre-drain hook called once, for ``record`` and its deadline; every eviction and then
    the provider's call found the node fully marked, after that call; each pod warned once.
    Returns the hook's call."""
    got = hook_calls(calls)
    assert len(got) == 1 and got[0]["record"] == record
    assert got[0]["deadline"] == h.records("n1")[0]["status"]["preDrainDeadline"]
    assert [what for what, _, _ in moments] == ["evict"] * pods + ["provider"]
    assert all(fully_marked(node, record) and called == 1 for _, node, called in moments)
    pod_warnings = [e for e in h.events(EVENT_DRAIN_WARNING) if e["involvedObject"]["kind"] == "Pod"]
    assert len(pod_warnings) == pods and all(e["count"] == 1 for e in pod_warnings)
    return got[0]


def is_eviction(req: Request) -> bool:
    return req.verb == "POST" and req.resource == "pods/eviction"


def is_provider_call(req: Request) -> bool:
    """The simulated provider's reset: its reboot request on the node."""
    return req.verb == "PATCH" and req.resource == "nodes" and isinstance(req.body, dict) \
        and REBOOT in ((req.body.get("metadata") or {}).get("annotations") or {})


def watch(h: Harness, calls: Path) -> list[tuple[str, JSON | None, int]]:
    """(what, the node as it is, hook calls so far) at every eviction and provider call."""
    moments: list[tuple[str, JSON | None, int]] = []

    def look(req: Request) -> None:
        if is_eviction(req) or is_provider_call(req):
            moments.append(("evict" if is_eviction(req) else "provider", h.node_obj("n1"), len(hook_calls(calls))))

    h.api.before.append(look)
    return moments


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(retry_errors=True)
    harness.node("n1")
    yield harness
    harness.stop()


@pytest.mark.parametrize("pods", [0, 1], ids=["no-pods", "one-pod"])
@pytest.mark.parametrize("acknowledgers", [(), ("slurm",)], ids=["nobody-to-wait-for", "slurm-acknowledges"])
def test_a_refused_marking_at_the_start_is_written_again_with_the_hook_called_once(
        h: Harness, tmp_path: Path, pods: int, acknowledgers: tuple[str, ...]) -> None:
    calls = hooked(h, tmp_path, acknowledgers)
    for i in range(pods):
        h.pod("n1", f"train-{i}")
    h.start()
    h.run()
    failed = fail(h, adds_label, REFUSED)
    moments = watch(h, calls)
    h.fault("n1")
    h.run(lambda: bool(h.errors))  # the reconcile that starts the repair: its node patch refused
    record = h.records("n1")[0]["metadata"]["name"]
    assert len(failed) == 1 and h.phase("n1") in ("Draining", "Acting")
    assert not fully_marked(h.node_obj("n1"), record) and hook_calls(calls) == []

    h.run(lambda: fully_marked(h.node_obj("n1"), record), seconds=5)  # the retry, after the backoff
    assert fully_marked(h.node_obj("n1"), record) and h.phase("n1") in ("Draining", "Acting")
    if acknowledgers:
        h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update(
            {NAMES.drain_ack("slurm"): record}))
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=600)
    h.run(seconds=30)
    assert h.phase("n1") == "Succeeded" and len(h.errors) == 1

    got = warned_once(h, calls, record, moments, pods)
    assert got["node"] == "n1"
    assert len(h.events(EVENT_SUCCEEDED)) == 1
    assert _clean(h.node_obj("n1"))


@pytest.mark.parametrize("acknowledgers", [(), ("slurm",)], ids=["nobody-to-wait-for", "slurm-acknowledges"])
def test_a_marking_that_keeps_failing_holds_the_provider_back(
        h: Harness, tmp_path: Path, acknowledgers: tuple[str, ...]) -> None:
    """While the node cannot be marked, the hook is not called and the provider is not asked: a
    node is never reset uncordoned. Once the API server takes the patch, the repair goes on."""
    calls = hooked(h, tmp_path, acknowledgers)
    h.start()
    h.run()
    failed = fail(h, adds_label, REFUSED, times=4)
    moments = watch(h, calls)
    h.fault("n1")
    h.run(lambda: len(failed) == 4, seconds=60)
    assert len(h.errors) == 4 and moments == [] and hook_calls(calls) == []
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=600)
    assert len(hook_calls(calls)) == 1
    assert [what for what, _, _ in moments] == ["provider"] and fully_marked(moments[0][1], h.records("n1")[0][
        "metadata"]["name"])


@pytest.mark.parametrize("crash", ["before-the-marking", "after-the-hook"])
def test_a_restarted_controller_calls_the_hook_once_in_all(tmp_path: Path, crash: str) -> None:
    """The controller stops right after the reconcile that started the repair: either its node
    patch was refused (the hook not called yet) or it went through (the hook called). The next
    controller reads which from the node, and the repair ends with one call of the hook."""
    first = Harness(retry_errors=True)
    first.node("n1")
    calls = hooked(first, tmp_path, ("slurm",))
    first.start()
    first.run()
    if crash == "before-the-marking":
        fail(first, adds_label, REFUSED)
    first.fault("n1")
    first.run(lambda: first.phase("n1") == "Draining")
    first.hook_threads.run()  # a hook the reconcile started runs on its own thread, crash or not
    assert len(hook_calls(calls)) == (0 if crash == "before-the-marking" else 1)
    first.fleet.stop()
    first.queue.close()

    second = Harness(world=first)
    try:
        second.start()
        second.run(lambda: fully_marked(second.node_obj("n1"), h_record(second)), seconds=5)
        assert fully_marked(second.node_obj("n1"), h_record(second))
        second.run(lambda: second.phase("n1") == "Succeeded", seconds=600)  # the wait ends at its deadline
        second.run(seconds=30)
        assert len(hook_calls(calls)) == 1 and _clean(second.node_obj("n1"))
    finally:
        second.stop()


def h_record(h: Harness) -> str:
    return str(h.records("n1")[0]["metadata"]["name"])


def test_a_failed_eviction_after_the_warning_does_not_call_the_hook_again(h: Harness, tmp_path: Path) -> None:
    """The patch and the hook went through, the plan's eviction after them failed: the retry
    finds the warning on the node (the reconciler keeps the node as written even when a later
    write fails) and does not call the hook a second time."""
    calls = hooked(h, tmp_path)
    h.pod("n1", "train-0")
    h.start()
    h.run()
    failed = fail(h, is_eviction, REFUSED)
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=600)
    assert len(failed) == 1 and len(h.errors) == 1 and len(hook_calls(calls)) == 1


def test_the_actuator_hands_over_the_node_it_wrote_before_a_later_write_failed(h: Harness) -> None:
    h.pod("n1", "train-0")
    node = h.node_obj("n1")
    h.api.before.append(lambda req: (_ for _ in ()).throw(REFUSED) if is_eviction(req) else None)
    kept: list[JSON] = []
    with pytest.raises(Unavailable):
        h.actuator.run((EnsureMarked(cordon=True), Drain()), "n1", node, None, None, node_written=kept.append)
    assert len(kept) == 1 and kept[0]["spec"]["unschedulable"] is True
    assert kept[0]["metadata"]["resourceVersion"] == (h.node_obj("n1") or {})["metadata"]["resourceVersion"]
    h.api.before.clear()
    kept.clear()
    h.actuator.run((EnsureMarked(cordon=True),), "n1", h.node_obj("n1"), None, None, node_written=kept.append)
    assert kept == []  # nothing written: nothing handed over


# an admission policy's refusal of the marking (what a ValidatingAdmissionPolicy answers)
POLICY_REFUSAL = ApiError(422, 'nodes "n1" is forbidden: ValidatingAdmissionPolicy \'freeze\' denied request')


def starts_operation(req: Request) -> bool:
    """The simulated provider starting an operation (a reset or a replacement): its node patch."""
    return req.verb == "PATCH" and req.resource == "nodes" and isinstance(req.body, dict) \
        and ANN_OPERATION in ((req.body.get("metadata") or {}).get("annotations") or {})


@pytest.mark.parametrize("pod_lands", [False, True], ids=["no-pods", "a-pod-lands-meanwhile"])
def test_a_replacement_after_a_marking_refused_past_the_operation_timeout_warns_and_calls_the_hook_once(
        h: Harness, tmp_path: Path, pod_lands: bool) -> None:
    """The marking is refused from the start until the reset's operation times out (the provider
    was never asked: the marking comes first). The replacement the reset escalates to is the
    first drain of the repair that gets through: it warns the node and its pods and calls the
    hook, once, before any eviction and before the provider is asked. Before, an escalation
    always drained "under the first warning", which had never gone out: the node was replaced
    without any warning and without the hook."""
    calls = hooked(h, tmp_path)
    h.start()
    h.run()
    refusing = [True]

    def refuse(req: Request) -> None:
        if refusing[0] and adds_label(req):
            raise POLICY_REFUSAL

    h.api.before.append(refuse)
    seen: list[tuple[str, JSON | None, int]] = []
    h.api.before.append(lambda req: seen.append(("evict" if is_eviction(req) else "provider", h.node_obj("n1"),
                                                 len(hook_calls(calls))))
                        if is_eviction(req) or starts_operation(req) else None)
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Acting", seconds=300)
    record = h_record(h)
    if pod_lands:
        h.pod("n1", "train-0")  # the node was never cordoned: work lands on it
    h.run(lambda: bool(h.records("n1")[0]["status"].get("escalated")), seconds=2400)
    assert h.records("n1")[0]["status"]["action"] == "replace" and seen == [] and hook_calls(calls) == []
    assert not fully_marked(h.node_obj("n1"), record)

    refusing[0] = False  # the policy is lifted
    h.run(lambda: h.phase("n1") == "Verifying", seconds=1200)
    new = h.records("n1")[0]["status"]["replacementNode"]
    h.api.edit(f"/api/v1/nodes/{new}", lambda n: n["status"].update(conditions=[  # kwok's part on a cluster
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]))
    h.run(lambda: h.phase("n1") == "Succeeded", seconds=60)
    assert h.phase("n1") == "Succeeded" and h.node_obj("n1") is None
    got = warned_once(h, calls, record, seen, int(pod_lands))
    assert got["action"] == "replace"
