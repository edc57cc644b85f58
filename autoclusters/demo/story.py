"""The scenarios the demo tells, and how it follows a repair live."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from autoclusters.clock import parse_iso
from autoclusters.deploy.workloads import GPU_TAINT
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import NotFound
from autoclusters.kube.objects import condition, node_ready
from autoclusters.names import Names
from autoclusters.ops.repairs import HOLDING_PHASES, TERMINAL_PHASES, Repair, repair_from_object
from autoclusters.ops.resources import list_remediations

Say = Callable[[str], None]
WORKLOAD_NAMESPACE = "training"


def say(msg: str = "") -> None:
    print(msg, flush=True)


@dataclass
class Result:
    scenario: str
    node: str
    fault: str
    consent_mode: str
    action: str = "-"
    outcome: str = "did not finish"
    phases: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    replacement: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "Succeeded"


def training_workload(pool_label: str, pool: str, replicas: int,
                      namespace: str = WORKLOAD_NAMESPACE) -> list[dict[str, Any]]:
    """A training-like job: one 8-GPU worker per node, checkpointing on SIGTERM (preStop),
    and a budget that lets one worker at a time be evicted."""
    labels = {"app": "trainer"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "trainer", "namespace": namespace},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "nodeSelector": {pool_label: pool},
                      "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                      "terminationGracePeriodSeconds": 30,
                      "containers": [{
                          "name": "worker", "image": "example.invalid/llm-pretrain:1",
                          "args": ["--checkpoint-dir=/ckpt", "--save-on-sigterm"],
                          "resources": {"limits": {"nvidia.com/gpu": "8"}},
                          "lifecycle": {"preStop": {"exec": {"command": [
                              "/bin/sh", "-c", "kill -USR1 1; while [ ! -f /ckpt/DONE ]; do sleep 1; done"]}}},
                      }]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "trainer", "namespace": namespace},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
    ]


def pods_on(handle: ClusterHandle, node: str, namespace: str = WORKLOAD_NAMESPACE) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in handle.kube.pods_on_node(node)
            if p["metadata"]["namespace"] == namespace]


def wait_running(handle: ClusterHandle, count: int, timeout: float = 90,
                 namespace: str = WORKLOAD_NAMESPACE) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        pods = handle.kube.list_items(f"/api/v1/namespaces/{namespace}/pods", label_selector="app=trainer")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")]
        if len(running) >= count:
            return running
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(running)}/{count} training workers Running after {timeout:.0f}s")
        time.sleep(0.5)


def inject(cluster_name: str, spool: str, node: str, xid: int | None, gpu: int, *, dcgm: str = "") -> str:
    kind = ["--dcgm", dcgm] if dcgm else ["--xid", str(xid)]
    cmd = ["autoclusters", "inject-fault", node, *kind, "--gpu", str(gpu), "--spool", spool]
    res = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *cmd[1:]], capture_output=True,
                         text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"inject-fault failed: {res.stderr.strip()}")
    return " ".join(cmd[:-2])


def approve(kubeconfig: str, node: str, names: Names) -> tuple[str, str]:
    cmd = ["autoclusters", "approve", node]
    if names != Names():
        cmd += ["--domain", names.domain, "--condition-prefix", names.prefix]
    res = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", *cmd[1:], "--kubeconfig", kubeconfig],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"approve failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return " ".join(cmd), res.stdout.strip()


def latest_record(handle: ClusterHandle, node: str, since: datetime) -> Repair | None:
    records = list_remediations(handle.kube, handle.names) or []
    mine = [repair_from_object(r) for r in records if (r.get("spec") or {}).get("node") == node]
    mine = [r for r in mine if r.started is None or r.started >= since.replace(microsecond=0)]
    return max(mine, key=lambda r: r.started or since, default=None)


def follow(handle: ClusterHandle, node: str, since: datetime, *, timeout: float, check: Callable[[], None],
           on_phase: Callable[[Repair], None] | None = None) -> Repair:
    """Prints each step of the node's repair as it happens, until the record finishes."""
    printed = 0
    t0 = time.monotonic()
    last_phase = ""
    while True:
        check()
        rec = latest_record(handle, node, since)
        if rec:
            for step in rec.steps[printed:]:
                at = (step.time - since).total_seconds() if step.time else time.monotonic() - t0
                say(f"    +{at:6.1f}s  {step.phase:<17} {step.message}")
            printed = len(rec.steps)
            if rec.phase != last_phase:
                last_phase = rec.phase
                if on_phase:
                    on_phase(rec)
            if rec.phase in TERMINAL_PHASES or rec.phase in HOLDING_PHASES:
                return rec
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"the repair of {node} did not finish within {timeout:.0f}s "
                               f"(phase: {last_phase or 'no record yet'})")
        time.sleep(0.3)


def phase_durations(rec: Repair) -> dict[str, float]:
    out: dict[str, float] = {}
    steps = [s for s in rec.steps if s.time]
    for a, b in itertools.pairwise(steps):
        out[a.phase] = out.get(a.phase, 0.0) + (b.time - a.time).total_seconds()  # type: ignore[operator]
    return out


def wait_condition(handle: ClusterHandle, node: str, status: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    ctype = handle.names.gpu_condition
    while True:
        try:
            cond = condition(handle.kube.get_node(node), ctype)
        except NotFound:
            cond = None
        if cond and cond.get("status") == status:
            return cond
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ctype} on {node} did not become {status} within {timeout:.0f}s")
        time.sleep(0.3)


def wait_back_in_service(handle: ClusterHandle, node: str, timeout: float = 60) -> dict[str, Any]:
    """Ready, schedulable, no maintenance labels or taint."""
    names = handle.names
    deadline = time.monotonic() + timeout
    while True:
        n = handle.kube.get_node(node)
        labels = n["metadata"].get("labels") or {}
        taints = [t for t in (n.get("spec") or {}).get("taints") or [] if t.get("key") == names.taint_key]
        if (node_ready(n) and not (n.get("spec") or {}).get("unschedulable") and not taints
                and names.maintenance_required not in labels and names.maintenance_approved not in labels):
            return n
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node} is not back in service after {timeout:.0f}s")
        time.sleep(0.3)


def now() -> datetime:
    return datetime.now(UTC)



def _event_time(e: dict[str, Any]) -> str:
    """What ``kubectl describe`` sorts events by."""
    return str((e.get("series") or {}).get("lastObservedTime") or e.get("lastTimestamp") or e.get("eventTime") or "")


def node_events(handle: ClusterHandle, node: str, source: str) -> list[dict[str, Any]]:
    """The controller's events on ``node``, in ``kubectl describe node`` order."""
    items = handle.kube.list_items("/api/v1/namespaces/default/events",
                             field_selector=f"involvedObject.kind=Node,involvedObject.name={node}")
    return sorted((e for e in items if (e.get("source") or {}).get("component") == source), key=_event_time)


def wait_for_event(handle: ClusterHandle, node: str, source: str, reason: str, since: datetime,
                   timeout: float = 30) -> None:
    """Until the controller's ``reason`` event about ``node``, emitted at ``since`` or later, is
    listed. The controller sends its events from a queue after the status writes they tell of,
    so the one that ends a repair can still be on its way when the node is back in service."""
    deadline = time.monotonic() + timeout
    while not any(e["reason"] == reason and (parse_iso(e.get("eventTime") or e.get("lastTimestamp")) or since) >= since
                  for e in node_events(handle, node, source)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {reason} event about {node} after {timeout:.0f}s")
        time.sleep(0.3)


def show_events(handle: ClusterHandle, node: str, source: str) -> list[dict[str, Any]]:
    """Prints the node's repair events the way ``kubectl describe node`` lists them."""
    events = node_events(handle, node, source)
    say(f"    $ kubectl describe node {node}   (Events)")
    width = max((len(e["reason"]) for e in events), default=6)
    say(f"      {'Type':<8} {'Reason':<{width}}  {'From':<{len(source)}}  Message")
    for e in events:
        say(f"      {e.get('type', ''):<8} {e['reason']:<{width}}  {source}  {e.get('message', '')}")
    return events
