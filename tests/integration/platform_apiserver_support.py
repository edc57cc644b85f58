"""The kube-apiserver and etcd taken away mid-repair (issue 28 item 1): a local cluster of the
tests' own, a controller on it, repairs parked at every phase, and the checks that every repair
ended once, with one provider action, no fault lost, events and records agreeing.

One cluster serves every case of ``test_platform_apiserver.py``: it is killed and restarted in
turn, so the session cluster of the other tests is never touched. Each case parks one repair
per phase and consent mode (``park``), injects its fault once for all of them, lets the world
move on (an approval, a PDB that allows, the detector looking after a reboot) and checks
(``finish``).
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from autoclusters import api
from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.kube import Kube
from autoclusters.kube.informer import LIST_REASONS
from autoclusters.kube.informer_metrics import LISTS
from autoclusters.names import EVENT_APPROVED, EVENT_AWAITING_APPROVAL, EVENT_FAILED, EVENT_STARTED, EVENT_SUCCEEDED
from autoclusters.pools import default_pool as defaults
from tests.integration.controller_support import ControllerProcess, Env, hold_drain
from tests.integration.helpers import wait_for
from tests.integration.test_controller_ha import assert_one_clean_reset, phase

# The controller's informers (controller/cache.py), as its metrics name them.
INFORMERS = ("nodes", "gpunodepools", "remediations", "default-pool")
# A slow reset keeps a repair in Acting through the fault (the simulated host's reboot).
ACTING_RESET_SECONDS = 10
HELD_DRAIN = {"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 120}


def say(msg: str) -> None:
    print(f"[platform] {msg}", file=sys.stderr, flush=True)


@dataclass
class Platform:
    """The cluster of these tests and its controller (one process for the module; it must live
    through every fault: its informers' recovery is what is tested)."""

    local: LocalCluster
    env: Env
    metrics_url: str

    @property
    def controller(self) -> ControllerProcess:
        (main,) = self.env.controllers
        return main

    def lists(self) -> dict[tuple[str, str], float]:
        """``autoclusters_informer_lists_total`` of the controller: (informer, reason) -> lists."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            text = r.read().decode()
        out: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            if family.name == LISTS:
                for s in family.samples:
                    if s.name == f"{LISTS}_total":
                        out[(s.labels["informer"], s.labels["reason"])] = s.value
        assert set(out) == {(i, r) for i in INFORMERS for r in LIST_REASONS}, sorted(out)
        return out

    def wait_lists(self, reason: str, before: dict[tuple[str, str], float], informers: tuple[str, ...] = INFORMERS,
                   timeout: float = 60) -> dict[tuple[str, str], float]:
        """Until each of ``informers`` has made a list for ``reason`` since ``before``: the positive
        sign that the controller's cache listed again, each collection whole."""
        def relisted() -> dict[tuple[str, str], float] | None:
            now = self.lists()
            return now if all(now[(i, reason)] > before[(i, reason)] for i in informers) else None

        return wait_for(f"lists of {informers} for {reason!r} since {before}", relisted, timeout=timeout)

    def controller_alive(self) -> None:
        """The one controller process is the one that started: the API server's or etcd's
        absence never cost it its lease (its informers recovered, not a fresh process)."""
        assert self.controller.proc.poll() is None, self.controller.log()[-3000:]


def collections(env: Env) -> dict[str, tuple[str, str | None]]:
    """What each informer of the controller watches: informer -> (path, label selector)."""
    return {"nodes": ("/api/v1/nodes", None), "gpunodepools": (env.pool_path(), None),
            "remediations": (Kube.custom_path(env.names.api_group, api.VERSION, api.REMEDIATIONS.plural), None),
            "default-pool": (f"/api/v1/namespaces/{env.namespace}/configmaps", defaults.SELECTOR)}


def newest_version(env: Env, informer: str) -> int:
    """The newest resourceVersion among the objects of an informer's collection (0: none)."""
    path, selector = collections(env)[informer]
    items = env.kube.list_items(path, label_selector=selector)
    return max((int(o["metadata"]["resourceVersion"]) for o in items), default=0)


# --- etcd's v3 HTTP/JSON gateway ------------------------------------------------------------------
def _etcd(local: LocalCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"{local.etcd_url}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.load(r))


def etcd_revision(local: LocalCluster) -> int:
    """etcd's current revision (the header of any read)."""
    got = _etcd(local, "/v3/kv/range", {"key": base64.b64encode(b"/registry/namespaces/default").decode()})
    return int(got["header"]["revision"])


def compact(local: LocalCluster) -> int:
    """Compacts etcd at its current revision (physically: done when the call returns); every
    older version is gone, so a watch resumed from one answers 410 Gone. Returns the revision."""
    revision = etcd_revision(local)
    _etcd(local, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


# --- repairs parked at every phase ----------------------------------------------------------------
@dataclass
class Parked:
    """One repair per phase and consent mode, parked when the fault is injected; what the world
    does meanwhile is done by ``release``."""

    env: Env
    namespace: str
    # node -> the phase it is parked in
    phases: dict[str, str] = field(default_factory=dict)
    proposed: list[str] = field(default_factory=list)  # propose pools' nodes (approved or not)
    waiting: str = ""  # the propose repair that waits for its approval
    draining: list[str] = field(default_factory=list)  # held by the PDB
    verifying: list[str] = field(default_factory=list)  # the "detector" has not looked yet
    acting: list[str] = field(default_factory=list)

    def nodes(self) -> list[str]:
        return list(self.phases)

    def release(self) -> None:
        """The world moves on: the approval comes, the PDB allows, the detector looks."""
        env = self.env
        env.approve(self.waiting)
        for node in self.draining:
            env.kube.patch(f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets/{node}",
                           {"spec": {"minAvailable": 0}})
        for node in self.verifying:
            env.watcher.hold_clear.discard(node)


def park(env: Env, namespace: str, *, acting_reset_seconds: float = ACTING_RESET_SECONDS) -> Parked:
    """Eight repairs, each in its own pool: under propose one awaiting approval and three
    approved at once (Draining, Acting, Verifying), under auto the same three and one more in
    Draining. Returns once every one of them is in its phase."""
    parked = Parked(env, namespace)
    slow = {"type": "simulated", "simulated": {"resetSeconds": acting_reset_seconds}}
    plan: list[tuple[str, str, dict[str, Any]]] = [
        ("propose", "AwaitingApproval", {}),
        ("propose", "Draining", {"drain": HELD_DRAIN}),
        ("propose", "Acting", {"provider": slow}),
        ("propose", "Verifying", {}),
        ("auto", "Draining", {"drain": HELD_DRAIN}),
        ("auto", "Acting", {"provider": slow}),
        ("auto", "Verifying", {}),
    ]
    for mode, where, spec in plan:
        _, (node,) = env.pool(mode, **spec)
        parked.phases[node] = where
        if mode == "propose":
            parked.proposed.append(node)
        if where == "AwaitingApproval":
            parked.waiting = node
        elif where == "Draining":
            parked.draining.append(node)
            hold_drain(env.kube, namespace, node, node)
        elif where == "Verifying":
            parked.verifying.append(node)
            env.watcher.hold_clear.add(node)
        else:
            parked.acting.append(node)
    for node in parked.nodes():
        env.raise_fault(node)
    for node in parked.proposed:  # approved as soon as asked: the repair runs on as under auto
        env.record_in(node, "AwaitingApproval")
        if node != parked.waiting:
            env.approve(node)
    seen: list[dict[str, str]] = []

    def all_parked() -> bool:
        seen.append({n: phase(env, n) for n in parked.nodes()})
        return seen[-1] == parked.phases

    try:
        wait_for("every repair in its phase", all_parked, timeout=60, interval=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}; wanted {parked.phases}, last seen {seen[-1:]}") from None
    return parked



# --- the checks -------------------------------------------------------------------------------------
def occurrences(env: Env, node: str, reason: str) -> int:
    """How often the controller said ``reason`` of ``node``: its events, a repeat counted in one."""
    total = 0
    for e in env.events(node):
        if e["reason"] == reason:
            total += max(1, int(e.get("count") or 0), int((e.get("series") or {}).get("count") or 0))
    return total


def assert_each_ended_once(env: Env, nodes: list[str], proposed: list[str]) -> None:
    """Every repair Succeeded, once (one record, one Acting step, one reset: the provider's one
    action), and the events agree with the record: one start and one success, no failure, and
    under propose one approval asked for and one given."""
    for node in nodes:
        assert_one_clean_reset(env, node)
        said = {r: occurrences(env, node, r) for r in (EVENT_STARTED, EVENT_SUCCEEDED, EVENT_FAILED)}
        assert said == {EVENT_STARTED: 1, EVENT_SUCCEEDED: 1, EVENT_FAILED: 0}, (node, said, env.reasons(node))
        if node in proposed:
            asked = {r: occurrences(env, node, r) for r in (EVENT_AWAITING_APPROVAL, EVENT_APPROVED)}
            assert asked == {EVENT_AWAITING_APPROVAL: 1, EVENT_APPROVED: 1}, (node, asked, env.reasons(node))
        (record,) = env.records(node)
        steps = [s["phase"] for s in record["status"]["steps"]]
        assert steps[-1] == "Succeeded" and steps.count("Succeeded") == 1, (node, steps)


def finish(env: Env, parked: Parked, also: list[str], started: float) -> float:
    """Releases the parked repairs, waits until each (and each of ``also``) Succeeded and checks
    them; returns the seconds from ``started`` (monotonic) until the last one Succeeded."""
    parked.release()
    nodes = [*parked.nodes(), *also]
    for node in nodes:
        env.record_in(node, "Succeeded", timeout=90)
    took = time.monotonic() - started
    assert_each_ended_once(env, nodes, parked.proposed)
    return took


def late_fault(env: Env) -> str:
    """A node of an auto pool whose fault is written just before the fault is injected: the
    controller may not have seen it when its watch broke; it must not be lost."""
    _, (node,) = env.pool("auto")
    return node

