"""Helpers for the controller's integration tests; their fixtures (``ctl``, ``controller_log``) are in conftest.py.

The controller runs as a subprocess under its own service account (RBAC from
``deploy/controller.py``), with every duration shortened through its flags, and under a
label domain of its own (``Env.names``: its own CRDs, labels, taint and conditions). It runs
for the whole session, so on the default domain it would act on what other tests stage by
hand (it removes maintenance labels and warnings it finds no repair for) and on what a
controller deployed on a cluster a kubeconfig names watches. The tests act as the detector:
they write the fault condition on ``nodes/status`` exactly as the detector does, and clear
it when they see the node's boot id change after a reset. Every process a test starts to
work with this controller (detector, Slurm bridge, CLI) gets its names through
``Env.process_env()``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoclusters import api
from autoclusters.allow_lists import FLAG as ALLOW_LISTS_FLAG
from autoclusters.allow_lists import AllowLists
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.stack_config import StackConfig
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Conflict, Kube, KubeError, NotFound
from autoclusters.names import Names
from autoclusters.pools import default_pool
from autoclusters.sim import nodes as simnodes
from autoclusters.sim.hosts import FAILING_IMAGE, MISSING_COMMAND_IMAGE
from tests.integration.helpers import controller_decided, controller_saw_gone, wait_for
from tests.integration.ops_support import private_domain

XID79_MESSAGE = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
XID48_MESSAGE = "GPU 1 reported Xid 48 (Double Bit ECC Error)."
ROW_REMAP_FAILURE_MESSAGE = "GPU 2 reported DCGM_FR_ROW_REMAP_FAILURE."  # a replace fault (no Xid bucket replaces)

EVENT_SOURCE = ControllerConfig().event_source  # the controllers here run with the default
CONTROLLER_FLAGS = {
    "--lease-seconds": "4", "--renew-deadline-seconds": "3", "--retry-period-seconds": "0.5",
    "--poll-seconds": "0.3", "--hold-recheck-seconds": "0.5", "--verify-timeout-seconds": "12",
    "--operation-timeout-seconds": "60", "--sim-reset-seconds": "1", "--sim-replace-seconds": "1",
    "--metrics-port": "0", "--resync-seconds": "20", "--workers": "8",
}


class ControllerProcess:
    """One ``autoclusters controller run`` subprocess; ``kill()`` is a SIGKILL, the honest crash."""

    def __init__(self, kubeconfig: str, namespace: str, log_dir: Path, identity: str,
                 extra: dict[str, str] | None = None, env: dict[str, str] | None = None) -> None:
        flags = {**CONTROLLER_FLAGS, **(extra or {})}
        self.identity = identity
        self.log_path = log_dir / f"controller-{identity}.log"
        argv = [sys.executable, "-m", "autoclusters.cli.main", "--verbose", "controller", "run",
                "--kubeconfig", kubeconfig, "--namespace", namespace, "--identity", identity]
        for k, v in flags.items():
            argv += [k, v]
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


SCRIPT_SLOTS = 16  # listed script slots per environment (Env.listed_script)


class Env:
    """What a controller test needs: the cluster, the controller's identity, helpers."""

    watcher: BootWatcher  # set by controller_env, which starts it with the Env

    def __init__(self, cluster: ClusterHandle, names: Names, namespace: str, kubeconfig: str, log_dir: Path) -> None:
        self.cluster = cluster
        self.kube: Kube = cluster.kube
        self.names = names  # the controller's own domain, not the cluster's default (cluster.names)
        self.namespace = namespace
        self.sa_kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.controllers: list[ControllerProcess] = []
        # The operator's allow-lists of this environment's controllers: a few fixed commands,
        # the sim's reboot images, and script slots (``listed_script``) whose argv is listed
        # while a test writes what the script does, as an operator owns /opt/replace-node.
        self.scripts = log_dir / "listed-scripts"
        self.scripts.mkdir(parents=True, exist_ok=True)
        self._slots = iter(range(SCRIPT_SLOTS))
        self.allow_lists = AllowLists(
            commands={**{f"script-{i}": (sys.executable, str(self.scripts / f"script-{i}.py"))
                         for i in range(SCRIPT_SLOTS)},
                      "fix": ("/nonexistent/fix",), "true": ("/bin/true",)},
            images={"default": StackConfig().image, "failing": FAILING_IMAGE, "missing": MISSING_COMMAND_IMAGE})
        self.pools: set[str] = set()  # the pools these tests made; other tests' nodes are not ours
        self.lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/autoclusters-controller"

    # --- controller processes ---------------------------------------------------------------
    def process_env(self, **more: str) -> dict[str, str]:
        """The environment for a process that works with this controller: its label domain
        and condition prefix (every autoclusters command reads them from there)."""
        return {**os.environ, "AUTOCLUSTERS_DOMAIN": self.names.domain,
                "AUTOCLUSTERS_CONDITION_PREFIX": self.names.prefix, **more}

    def listed_script(self, code: str) -> list[str]:
        """The argv of a listed script slot that runs ``code`` (each call: a slot of its own)."""
        path = self.scripts / f"script-{next(self._slots)}.py"
        path.write_text(code)
        return [sys.executable, str(path)]

    def start_controller(self, identity: str | None = None, **extra: str) -> ControllerProcess:
        flags = {ALLOW_LISTS_FLAG: self.allow_lists.flag_value(),
                 **{f"--{k.replace('_', '-')}": v for k, v in extra.items()}}
        c = ControllerProcess(self.sa_kubeconfig, self.namespace, self.log_dir,
                              identity or f"ctl-{secrets.token_hex(2)}", flags,
                              env=self.process_env())
        self.controllers.append(c)
        return c

    def running(self) -> list[ControllerProcess]:
        return [c for c in self.controllers if c.proc.poll() is None]

    def ensure_one_controller(self) -> None:
        """Leaves exactly one running replica (later tests expect one)."""
        alive = self.running()
        for c in alive[1:]:
            c.terminate()
        if not alive:
            alive = [self.start_controller()]
        self.wait_leader(alive[:1], timeout=30)

    def leader(self) -> str:
        with contextlib.suppress(NotFound):
            return str((self.kube.get(self.lease_path).get("spec") or {}).get("holderIdentity") or "")
        return ""

    def wait_leader(self, among: list[ControllerProcess], timeout: float = 20) -> ControllerProcess:
        ids = {c.identity: c for c in among}
        return wait_for("a leader", lambda: ids.get(self.leader()), timeout=timeout)

    # --- pools and nodes --------------------------------------------------------------------------
    def pool(self, mode: str = "auto", nodes: int = 1, **spec: Any) -> tuple[str, list[str]]:
        name = f"p{secrets.token_hex(3)}"
        body = {"apiVersion": f"{self.names.api_group}/{api.VERSION}", "kind": "GpuNodePool",
                "metadata": {"name": name},
                "spec": {"consentMode": mode, "drain": {"resetDeadlineSeconds": 5, "replaceDeadlineSeconds": 5},
                         "provider": {"type": "simulated"}, **spec}}
        self.kube.create(self.pool_path(), body)
        self.pools.add(name)
        made = self.create_gpu_nodes(name, nodes, prefix=name) if nodes else []
        return name, made

    def create_gpu_nodes(self, pool: str, count: int, prefix: str | None = None) -> list[str]:
        """Ready simulated GPU nodes labelled under this controller's domain."""
        made = simnodes.create_gpu_nodes(self.kube, pool, count, self.names, prefix=prefix)
        self.cluster.wait_nodes_ready(made)
        return made

    def pool_path(self, name: str | None = None) -> str:
        return Kube.custom_path(self.names.api_group, api.VERSION, "gpunodepools", name)

    def patch_pool(self, name: str, spec: dict[str, Any]) -> None:
        self.kube.patch(self.pool_path(name), {"spec": spec})

    @contextlib.contextmanager
    def workload_namespace(self, prefix: str) -> Iterator[str]:
        """A namespace of its own for one test's workload pods, deleted afterwards."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        with contextlib.suppress(Conflict):
            self.kube.create("/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        try:
            yield name
        finally:
            with contextlib.suppress(NotFound):
                self.kube.delete(f"/api/v1/namespaces/{name}")

    def get_pool(self, name: str) -> dict[str, Any]:
        return self.kube.get(self.pool_path(name))

    # --- acting as the detector ----------------------------------------------------------------------
    def raise_fault(self, node: str, message: str = XID79_MESSAGE, reason: str = "") -> None:
        """The detector's condition; the reason as the detector writes it for the message's kind."""
        reason = reason or ("NvidiaDCGMError" if "DCGM_FR_" in message else "NvidiaXIDError")
        now = utc_iso(SystemClock().now())
        self.kube.patch_node_status(node, {"status": {"conditions": [{
            "type": self.names.gpu_condition, "status": "True", "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    def clear_fault(self, node: str) -> None:
        now = utc_iso(SystemClock().now())
        self.kube.patch_node_status(node, {"status": {"conditions": [{
            "type": self.names.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
            "message": "No GPU fault detected.", "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    def node(self, name: str) -> dict[str, Any]:
        """The node; a missing one fails (``find_node`` when being gone is an answer)."""
        return self.kube.get_node(name)

    def find_node(self, name: str) -> dict[str, Any] | None:
        """The node, or None once it is gone."""
        try:
            return self.kube.get_node(name)
        except NotFound:
            return None

    def labels(self, name: str) -> dict[str, str]:
        return ((self.find_node(name) or {}).get("metadata") or {}).get("labels") or {}

    def has_taint(self, name: str) -> bool:
        taints = ((self.find_node(name) or {}).get("spec") or {}).get("taints") or []
        return any(t.get("key") == self.names.taint_key for t in taints)

    def approve(self, node: str) -> None:
        self.kube.patch_node(node, {"metadata": {"labels": {self.names.maintenance_approved: "true"}}})

    def pool_nodes(self, pool: str) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.kube.list_nodes(f"{self.names.pool_label}={pool}"))

    def decided(self, node: str) -> str:
        """The positive sign that the controller has looked at ``node`` as it stands now and
        decided (``helpers.controller_decided``, in the running replicas' logs; they run
        ``--verbose``): what the line says of the node's open repair ("no open repair", or
        "record NAME PHASE"); the check of what did not happen comes after."""
        return controller_decided(self.kube, node, lambda: [c.log_path for c in self.running()])

    def saw_gone(self, node: str) -> str:
        """The positive sign that the controller knows ``node`` was deleted
        (``helpers.controller_saw_gone``): what its reconcile then said of the open repair."""
        return controller_saw_gone(node, lambda: [c.log_path for c in self.running()])

    # --- records and events -------------------------------------------------------------------------
    def records(self, node: str | None = None, pool: str | None = None) -> list[dict[str, Any]]:
        items = self.kube.list_items(Kube.custom_path(self.names.api_group, api.VERSION, "remediations"))
        out = [r for r in items if (node is None or r["spec"]["node"] == node)
               and (pool is None or r["spec"]["pool"] == pool)]
        return sorted(out, key=lambda r: r["metadata"]["creationTimestamp"] + r["metadata"]["name"])

    def record_in(self, node: str, *phases: str, timeout: float = 30) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            for r in reversed(self.records(node)):
                if (r.get("status") or {}).get("phase") in phases:
                    return r
            return None
        return wait_for(f"a record of {node} in {phases}", check, timeout=timeout)

    def events(self, name: str, kind: str = "Node") -> list[dict[str, Any]]:
        items = self.kube.list_items("/api/v1/namespaces/default/events",
                               field_selector=f"involvedObject.name={name},involvedObject.kind={kind}")
        items = [e for e in items if e.get("reportingComponent") == EVENT_SOURCE]
        return sorted(items, key=lambda e: e.get("eventTime") or "")

    def reasons(self, name: str, kind: str = "Node") -> list[str]:
        return [e["reason"] for e in self.events(name, kind)]

    def wait_reason(self, name: str, reason: str, kind: str = "Node", timeout: float = 30) -> dict[str, Any]:
        return wait_for(f"event {reason} on {kind} {name}",
                        lambda: next((e for e in self.events(name, kind) if e["reason"] == reason), None),
                        timeout=timeout)


class BootWatcher:
    """Acts as the detector after a reboot: a changed boot id clears the fault, unless the
    node's simulated hardware is broken for good (``persistent``), when it comes back."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.persistent: set[str] = set()
        self.hold_clear: set[str] = set()  # rebooted, but the "detector" has not looked yet
        self.ignore: set[str] = set()  # nodes the real detector serves
        self.boot_changes: dict[str, int] = {}
        self._pending: set[str] = set()
        self._boots: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BootWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                for node in self.env.kube.list_nodes(f"{self.env.names.pool_label}"):
                    name = node["metadata"]["name"]
                    pool = (node["metadata"].get("labels") or {}).get(self.env.names.pool_label)
                    if name in self.ignore or pool not in self.env.pools:
                        continue  # the real detector's node, or another test's
                    boot = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
                    before = self._boots.get(name)
                    self._boots[name] = boot
                    if before and boot and before != boot:  # "" -> id is the node's first status write
                        self.boot_changes[name] = self.boot_changes.get(name, 0) + 1
                        self._pending.add(name)
                    if name not in self._pending or name in self.hold_clear:
                        continue
                    self._pending.discard(name)
                    conds = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
                    cond = conds.get(self.env.names.gpu_condition)
                    if cond and cond.get("status") == "True":
                        self.env.clear_fault(name)
                        if name in self.persistent:
                            time.sleep(0.5)
                            self.env.raise_fault(name, cond.get("message", XID79_MESSAGE), cond.get("reason"))
            except KubeError as e:  # the stand-in must keep running through API hiccups
                print(f"boot watcher: {e}", file=sys.stderr)

def hold_drain(kube: Kube, namespace: str, node: str, name: str) -> None:
    """A pod ``name`` on ``node`` whose PodDisruptionBudget (also ``name``) allows no eviction:
    the node's drain waits until the budget is lowered. The pod is created once the namespace
    has its default service account (admission refuses it before; after an API server restart
    kube-controller-manager creates it only once its own watches are back)."""
    def has_default_account() -> bool:
        try:
            kube.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
        except NotFound:
            return False
        return True

    wait_for(f"the default service account of {namespace}", has_default_account)
    kube.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"held": name}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "registry.example/trainer:1"}]}})
    kube.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"held": name}}}})
    wait_for(f"the PDB of {name}", lambda: kube.get(
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}").get("status", {}).get(
        "currentHealthy") == 1)


@contextlib.contextmanager
def controller_env(cluster: ClusterHandle, log_dir: Path, owner: str = "ctl",
                   **main_flags: str) -> Iterator[Env]:
    """A label domain of its own with its CRDs, a namespace, the controller's RBAC and
    identity, the boot watcher and one running controller (the ``ctl`` fixture of
    conftest.py: one lease for the session); ``main_flags`` go to that controller (as
    ``Env.start_controller`` takes them)."""
    suffix = secrets.token_hex(3)
    with private_domain(cluster, suffix, owner=owner) as names:
        yield from _controller_env(cluster, names, f"{owner}-{suffix}", log_dir, main_flags)


def _controller_env(cluster: ClusterHandle, names: Names, namespace: str, log_dir: Path,
                    main_flags: dict[str, str] | None = None) -> Iterator[Env]:
    with contextlib.suppress(Conflict):
        cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": namespace}})
    rbac = controller_rbac(names, namespace=namespace, service_account="autoclusters-controller")
    cluster.apply(rbac)
    # The cluster default policy off: a node labelled with a pool that has no GpuNodePool is
    # left alone unless a test says otherwise (test_controller_providers switches it on briefly).
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                        default_pool.configmap({"consentMode": "off"}, namespace))
    kubeconfig = cluster.service_account_kubeconfig(namespace, "autoclusters-controller")
    log_dir.mkdir(parents=True, exist_ok=True)
    env = Env(cluster, names, namespace, kubeconfig, log_dir)
    watcher = BootWatcher(env).start()
    env.watcher = watcher
    main = env.start_controller("main", **(main_flags or {}))
    env.wait_leader([main])
    try:
        yield env
    finally:
        watcher.stop()
        for c in env.controllers:
            c.terminate()
        for c in env.controllers:
            if os.environ.get("AUTOCLUSTERS_TEST_SHOW_LOGS"):
                print(c.log()[-5000:], file=sys.stderr)
        with contextlib.suppress(NotFound):
            cluster.kube.delete(f"/api/v1/namespaces/{namespace}")
        for obj in rbac:
            if obj["kind"].startswith("Cluster"):
                with contextlib.suppress(NotFound):
                    cluster.kube.delete(f"/apis/rbac.authorization.k8s.io/v1/{obj['kind'].lower()}s/"
                                        f"{obj['metadata']['name']}")
