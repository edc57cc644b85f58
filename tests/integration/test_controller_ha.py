"""Crash safety and high availability: kill -9 at every phase boundary, two replicas."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.integration.controller_support import Env, hold_drain
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture()
def ns(ctl: Env) -> Iterator[str]:
    with ctl.workload_namespace("ha") as name:
        yield name
        ctl.ensure_one_controller()


def phase(ctl: Env, node: str) -> str:
    recs = ctl.records(node)
    return recs[-1].get("status", {}).get("phase", "") if recs else ""


def assert_one_clean_reset(ctl: Env, node: str) -> None:
    recs = ctl.records(node)
    assert len(recs) == 1, [r["metadata"]["name"] for r in recs]
    status = recs[0]["status"]
    assert status["phase"] == "Succeeded" and status["action"] == "reset" and status["attempts"] == 1
    assert ctl.watcher.boot_changes.get(node) == 1  # exactly one reset happened
    assert [s["phase"] for s in status["steps"]].count("Acting") == 1


def test_killed_at_each_phase_boundary_resumes_without_double_or_lost_repair(ctl: Env, ns: str) -> None:
    # Four nodes, each parked in a different phase when the controller is killed.
    _, (waiting,) = ctl.pool("propose")
    _, (draining,) = ctl.pool("auto", drain={"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 120})
    _, (acting,) = ctl.pool("auto", provider={"type": "simulated", "simulated": {"resetSeconds": 8}})
    _, (verifying,) = ctl.pool("auto")
    hold_drain(ctl.kube, ns, draining, "held")
    ctl.watcher.hold_clear.add(verifying)
    for node in (waiting, draining, acting, verifying):
        ctl.raise_fault(node)
    parked = ["AwaitingApproval", "Draining", "Acting", "Verifying"]
    seen: list[list[str]] = []

    def all_parked() -> bool:
        seen.append([phase(ctl, x) for x in (waiting, draining, acting, verifying)])
        return seen[-1] == parked

    try:
        wait_for("all parked", all_parked, timeout=30, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; phases seen: {seen[-3:]}") from None
    for c in ctl.running():
        c.kill()
    # while no controller runs, the world moves on: an approval, the PDB allows, the detector looks
    ctl.approve(waiting)
    ctl.kube.patch(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/held", {"spec": {"minAvailable": 0}})
    ctl.watcher.hold_clear.discard(verifying)
    fresh = ctl.start_controller()
    ctl.wait_leader([fresh], timeout=30)
    for node in (waiting, draining, acting, verifying):
        ctl.record_in(node, "Succeeded", timeout=60)
        assert_one_clean_reset(ctl, node)


def test_repeated_kills_during_repairs_never_double_a_reset(ctl: Env) -> None:
    _, nodes = ctl.pool("auto", nodes=3, maxConcurrentRepairs=3,
                        circuitBreaker={"openAbovePercent": 100, "closeBelowPercent": 100},
                        provider={"type": "simulated", "simulated": {"resetSeconds": 2}})
    for node in nodes:
        ctl.raise_fault(node)
    for _ in range(4):
        time.sleep(1.5)
        for c in ctl.running():
            c.kill()
        c = ctl.start_controller()
        ctl.wait_leader([c], timeout=30)
    for node in nodes:
        ctl.record_in(node, "Succeeded", timeout=60)
        assert_one_clean_reset(ctl, node)


def test_two_replicas_never_both_act(ctl: Env) -> None:
    first = ctl.running()[0]
    second = ctl.start_controller("standby")
    # the standby's sign (its --verbose line per look at the lease): it saw the leader renew
    # (two renewTimes) and left the lease to it both times
    looked = re.compile(rf"lease \S+ held by {re.escape(first.identity)} \(renewed (\S+)\): not taken\n")
    wait_for("the standby's looks at two renewals of the lease",
             lambda: len(set(looked.findall(second.log()))) >= 2)
    assert ctl.leader() == first.identity
    assert "became the leader" not in second.log()
    _, (node,) = ctl.pool("auto")
    ctl.raise_fault(node)
    ctl.record_in(node, "Succeeded", timeout=40)
    assert_one_clean_reset(ctl, node)
    assert "became the leader" not in second.log()
    # the leader dies: the standby takes over only after the lease expired, then repairs
    first.kill()
    killed_at = time.monotonic()
    wait_for("standby leads", lambda: ctl.leader() == "standby", timeout=30)
    assert time.monotonic() - killed_at >= 2  # it waited for the lease to expire
    _, (other,) = ctl.pool("auto")
    ctl.raise_fault(other)
    ctl.record_in(other, "Succeeded", timeout=40)
    assert_one_clean_reset(ctl, other)
    lease = ctl.kube.get(ctl.lease_path)["spec"]
    assert lease["holderIdentity"] == "standby" and lease["leaseTransitions"] >= 1
