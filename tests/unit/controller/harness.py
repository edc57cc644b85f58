"""The controller's real pieces (informers, cache, reconciler, actuator, event recorder, the
simulated provider) wired to the fake API server and a fake clock, with the work queue
driven by the test: ``run()`` hands out due keys one at a time and moves the clock to the
next requeue when nothing is due, so a whole repair takes milliseconds and never sleeps.

The test plays the detector: ``fault(node)`` writes the GPU condition as the detector does,
and ``run(detector=True)`` clears it once the node comes back with a new boot id. ``run``
also plays the simulated hosts' reboots (``KwokReboots``), which kwok's stages play on the
local cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from autoclusters import api
from autoclusters.allow_lists import AllowList, AllowLists
from autoclusters.clock import FakeClock, parse_iso, utc_iso
from autoclusters.controller.actuator import Actuator
from autoclusters.controller.cache import Fleet
from autoclusters.controller.controller_metrics import Metrics
from autoclusters.controller.hook import HookRunner
from autoclusters.controller.reconciler import Reconciler, Settings
from autoclusters.controller.shards import Shard
from autoclusters.controller.statemachine import RepairPolicy
from autoclusters.deploy.providers import NO_PROVIDER, ProviderSettingsError, parse_provider_choice
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube import Kube, KubeError
from autoclusters.kube.events import EventRecorder
from autoclusters.kube.workqueue import WorkQueue
from autoclusters.names import Names
from autoclusters.pools.allow_listed import provider_fields
from autoclusters.sim import nodes as sim
from autoclusters.sim.hosts import REBOOT, REBOOT_UNTIL, boot_id_after
from tests.unit import builders
from tests.unit.fakeapi import FakeApi

JSON = dict[str, Any]
NAMES = Names()
NAMESPACE = "autoclusters-system"
XID79 = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
ROW_REMAP_FAILURE = "GPU 2 reported DCGM_FR_ROW_REMAP_FAILURE."  # a replace fault (no Xid bucket replaces)


class Notes:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def notify(self, subject: str, details: dict[str, Any]) -> None:
        self.sent.append((subject, details))


class HookThreads:
    """Stands in for the hook runner's threads: hooks started by a reconcile wait here until
    ``run`` (the harness's loop calls it before each key), so a test sees a reconcile end
    with its hook not yet run, and the hook's end requeue the node as the real threads do."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def submit(self, call: Callable[[], None]) -> None:
        self.pending.append(call)

    def run(self) -> int:
        calls, self.pending = self.pending, []
        for call in calls:
            call()
        return len(calls)


class KwokReboots:
    """Stands in for the reboot stages of ``autoclusters/sim/kwok-stages.yaml``, which kwok plays
    on the local cluster: a node annotated ``REBOOT`` goes Ready=False at once and, once the fake
    clock reaches ``REBOOT_UNTIL`` (3 s when absent), gets the new bootID the request makes
    (``boot_id_after``), Ready=True and loses both annotations. Writes as kwok does: not requests of the controller."""

    DEFAULT_SECONDS = 3.0  # the up stage's durationMilliseconds

    def __init__(self, api: FakeApi, clock: FakeClock) -> None:
        self.api = api
        self.clock = clock
        self.reboots = 0
        self._seen: dict[str, float] = {}  # when each node's request was first seen (the default's start)

    def _until(self, node: JSON) -> float:
        """The fake monotonic time the node's reboot ends."""
        at = parse_iso((node["metadata"].get("annotations") or {}).get(REBOOT_UNTIL))
        if at is None:
            return self._seen.setdefault(node["metadata"]["name"], self.clock.monotonic()) + self.DEFAULT_SECONDS
        return self.clock.monotonic() + (at - self.clock.now()).total_seconds()

    def rebooting(self) -> list[JSON]:
        return [n for n in self.api.items("/api/v1/nodes") if REBOOT in (n["metadata"].get("annotations") or {})]

    def next_due(self) -> float | None:
        return min((self._until(n) for n in self.rebooting()), default=None)

    def play(self) -> None:
        for node in self.rebooting():
            name = node["metadata"]["name"]
            if self.clock.monotonic() >= self._until(node):
                self.reboots += 1
                self._seen.pop(name, None)
                by = node["metadata"]["annotations"][REBOOT]
                self.api.edit(f"/api/v1/nodes/{name}", functools.partial(_boot, boot_id=boot_id_after(by)))
            elif _ready(node):
                self.api.edit(f"/api/v1/nodes/{name}", functools.partial(_set_condition, cond={
                    "type": "Ready", "status": "False", "reason": "HostRebooting", "message": "rebooting"}))


class Harness:
    def __init__(self, *, poll_seconds: float = 2.0, sim_seconds: float = 5.0, workers_race: bool = False,
                 shard: Shard | None = None, world: Harness | None = None, retry_errors: bool = False) -> None:
        """``shard``: the pools this controller owns (all by default); ``world``: another harness
        whose fake API and clock this one shares (a second controller of the same cluster);
        ``retry_errors``: a reconcile that raises a ``KubeError`` is retried after the work queue's
        backoff, as the manager's workers do (the errors are kept in ``errors``), instead of failing
        the test."""
        self.clock: FakeClock = world.clock if world else FakeClock()
        self.api: FakeApi = world.api if world else FakeApi(clock=self.clock.now)
        self.kube: Kube = self.api.kube()
        self.names = NAMES
        self.queue = WorkQueue(monotonic=self.clock.monotonic)
        self.fleet = Fleet(self.kube, NAMES, load_catalog(), self.queue.add, namespace=NAMESPACE, shard=shard)
        self.recorder = EventRecorder(self.kube, self.clock, "autoclusters-controller", instance="test")
        self.notes = Notes()
        self.hook_threads = HookThreads()
        # The operator's allow-lists: ``pool`` lists what its pool names, as the operator of a
        # cluster whose pools run would (``pool(..., listed=False)``: it does not).
        self.allowed: dict[AllowList, dict[str, Any]] = world.allowed if world else {kind: {} for kind in AllowList}
        self.lists = lists = AllowLists(**{kind.value: entries for kind, entries in self.allowed.items()})
        self.actuator = Actuator(self.kube, NAMES, self.recorder, self.notes, clock=self.clock,
                                 hooks=HookRunner(submit=self.hook_threads.submit, requeue=self.queue.add,
                                                  lists=lists))
        self.policy = RepairPolicy(poll_seconds=poll_seconds, hold_recheck_seconds=10, verify_timeout_seconds=600,
                             operation_timeout_seconds=1800, approval_label=NAMES.maintenance_approved)
        self.metrics = Metrics()
        self.reconciler = Reconciler(self.kube, self.clock, self.fleet, self.actuator, self.recorder, self.metrics,
                                     Settings(self.policy, sim_reset_seconds=sim_seconds,
                                              sim_replace_seconds=sim_seconds, namespace=NAMESPACE,
                                              allow_lists=lists))
        self.hosts: KwokReboots = world.hosts if world else KwokReboots(self.api, self.clock)
        self.boot_at_fault: dict[str, str] = world.boot_at_fault if world else {}
        self.detector_delay = 1.0  # seconds between a node's new boot id and the detector clearing its fault
        self._rebooted_at: dict[str, float] = world._rebooted_at if world else {}
        self.started = False
        self.retry_errors = retry_errors
        self.errors: list[tuple[str, KubeError]] = []

    # --- the world --------------------------------------------------------------------------
    def pool(self, name: str = "p", mode: str = "auto", *, listed: bool = True, **spec: Any) -> JSON:
        """Writes pool ``name``; ``listed``: the operator lists the commands, images and URLs it names."""
        pool_spec: JSON = {"consentMode": mode, "drain": {"resetDeadlineSeconds": 300, "replaceDeadlineSeconds": 600},
                           "provider": {"type": "simulated"}, **spec}
        body = {"apiVersion": f"{NAMES.api_group}/{api.VERSION}", "kind": "GpuNodePool", "metadata": {"name": name},
                "spec": pool_spec}
        if listed:
            self.allow(pool_spec)
        return self.api.put(self.pool_path(), body)

    def allow(self, spec: JSON) -> None:
        """The operator adds what pool ``spec`` names to its allow-lists."""
        hook = (spec.get("preDrain") or {}).get("hook") or {}
        named = [(AllowList.COMMANDS, tuple(hook["command"]))] if hook.get("command") else []
        named += [(AllowList.URLS, hook["url"])] if hook.get("url") else []
        try:
            provider = parse_provider_choice(spec.get("provider"))
        except ProviderSettingsError:  # a test of invalid settings: nothing of it to list
            provider = NO_PROVIDER
        named += [(kind, tuple(v) if isinstance(v, list) else v) for _, kind, v in provider_fields(provider)]
        for kind, value in named:
            self.allowed[kind][f"entry-{len(self.allowed[kind])}"] = value

    def pool_path(self, name: str | None = None) -> str:
        return Kube.custom_path(NAMES.api_group, api.VERSION, "gpunodepools", name)

    def record_path(self, name: str | None = None) -> str:
        return Kube.custom_path(NAMES.api_group, api.VERSION, "remediations", name)

    def node(self, name: str, pool: str = "p", **labels: str) -> JSON:
        manifest = sim.gpu_node_manifest(name, pool, NAMES)
        manifest["metadata"]["labels"].update(labels)
        manifest["status"].setdefault("nodeInfo", {})["bootID"] = f"boot-{name}-0"
        manifest["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                             "message": "ok"}]
        return self.api.put("/api/v1/nodes", manifest)

    def pod(self, node: str, name: str, namespace: str = "default", **labels: str) -> JSON:
        return self.api.put(f"/api/v1/namespaces/{namespace}/pods", builders.pod(name, node, namespace, labels=labels))

    def fault(self, node: str, message: str = XID79) -> None:
        """The detector's condition, written on nodes/status (not a request of the controller)."""
        now = utc_iso(self.clock.now())
        reason = "NvidiaDCGMError" if "DCGM_FR_" in message else "NvidiaXIDError"  # as the detector writes them
        cond = {"type": NAMES.gpu_condition, "status": "True", "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}
        self.boot_at_fault[node] = self.boot_id(node)
        self.api.edit(f"/api/v1/nodes/{node}", lambda n: _set_condition(n, cond))

    def clear_fault(self, node: str) -> None:
        now = utc_iso(self.clock.now())
        cond = {"type": NAMES.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
                "message": "No GPU fault detected.", "lastHeartbeatTime": now, "lastTransitionTime": now}
        self.boot_at_fault.pop(node, None)
        self.api.edit(f"/api/v1/nodes/{node}", lambda n: _set_condition(n, cond))

    def boot_id(self, node: str) -> str:
        obj = self.api.read(f"/api/v1/nodes/{node}") or {}
        return str(((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))

    def records(self, node: str | None = None) -> list[JSON]:
        return [r for r in self.api.items(self.record_path()) if node is None or r["spec"]["node"] == node]

    def phase(self, node: str) -> str:
        recs = sorted(self.records(node), key=lambda r: r["metadata"]["resourceVersion"])
        return str(((recs[-1] if recs else {}).get("status") or {}).get("phase", ""))

    def node_obj(self, node: str) -> JSON | None:
        return self.api.read(f"/api/v1/nodes/{node}")

    def events(self, reason: str | None = None) -> list[JSON]:
        return [e for e in self.api.items("/api/v1/namespaces/default/events")
                if reason is None or e["reason"] == reason]

    # --- the controller -------------------------------------------------------------------------
    def start(self) -> None:
        self.fleet.start(timeout=5)
        self.api.min_watchers = 4  # nodes, pools, records, the default-pool ConfigMap
        self.api.settle()
        self.started = True

    def stop(self) -> None:
        self.fleet.stop()
        self.queue.close()
        self.api.close()

    def _detector(self) -> None:
        """Clears a fault ``detector_delay`` seconds after the node came back with a new boot id."""
        now = self.clock.monotonic()
        for node, boot in list(self.boot_at_fault.items()):
            now_boot = self.boot_id(node)
            if now_boot and now_boot != boot:
                seen = self._rebooted_at.setdefault(node, now)
                if now >= seen + self.detector_delay:
                    self._rebooted_at.pop(node)
                    self.clear_fault(node)

    def step(self) -> str | None:
        """One due key reconciled (None: nothing due now), after the hooks started so far ran."""
        self.hook_threads.run()
        self.api.settle()
        key = self.queue.get(timeout=0)
        if key is None:
            return None
        try:
            after = self.reconciler.reconcile(key)
            self.queue.forget(key)
            if after is not None:
                self.queue.add(key, after)
        except KubeError as e:
            if not self.retry_errors:
                raise
            self.errors.append((key, e))
            self.queue.backoff(key)
        finally:
            self.queue.done(key)
        self.api.settle()
        return key

    def run(self, until: Callable[[], bool] = lambda: False, *, seconds: float = 120, detector: bool = True
            ) -> list[str]:
        """Reconciles due keys, moving the clock to the next requeue when none is due, until
        ``until()`` or ``seconds`` of fake time (or nothing is queued at all)."""
        keys: list[str] = []
        end = self.clock.monotonic() + seconds
        while not until() and self.clock.monotonic() < end:
            self.hosts.play()
            if detector:
                self._detector()
            key = self.step()
            if key is not None:
                keys.append(key)
                continue
            due = min((t for t in (self._next_due(), self.hosts.next_due()) if t is not None), default=None)
            if detector and self._rebooted_at:
                clear_at = min(self._rebooted_at.values()) + self.detector_delay
                due = clear_at if due is None else min(due, clear_at)
            if due is None:
                break
            self.clock.advance(max(min(due, end) - self.clock.monotonic(), 0.001))  # never past ``seconds``
        return keys

    def _next_due(self) -> float | None:
        with self.queue._cond:
            dues = list(self.queue._due.values())
        return min(dues) if dues else None


def _ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _boot(node: JSON, boot_id: str) -> None:
    node["status"].setdefault("nodeInfo", {})["bootID"] = boot_id
    _set_condition(node, {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"})
    for key in (REBOOT, REBOOT_UNTIL):
        node["metadata"]["annotations"].pop(key, None)


def _set_condition(node: JSON, cond: JSON) -> None:
    conds = node.setdefault("status", {}).setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            conds[i] = cond
            return
    conds.append(cond)
