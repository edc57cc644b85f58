"""Platform overhead of the remediation controller (docs/contract.md, "Targets"), on a running cluster.

    python benchmarks/controller_overhead.py --kubeconfig $(autoclusters dev kubeconfig --name NAME) \\
        --nodes 1000 --faults 50

Creates a pool of simulated GPU nodes, runs ``autoclusters controller run`` as a
subprocess under its own service account (default flags, except the simulated reset
time), raises ``--faults`` GPU faults at once (as the detector would), acts as the detector
after each reboot (clears the condition when it sees the new bootID), and measures from
its own watch streams with a monotonic clock:

  report   fault written            -> the Remediation record appears
  start    record appears           -> record in Acting (decision, marking, cordon, drain of 0 pods)
  act      Acting                   -> Verifying, minus the reset: the provider's fixed reset time
                                       and the simulated host's lag past its end (kwok's reboot
                                       stage, the reset's end -> the new bootID seen)
  verify   condition cleared        -> Succeeded (the controller's reaction to a healthy node)
  total    fault written -> Succeeded, minus the reset and the stand-in detector's reaction
           (the total with the host's lag, as measured before 2026-12-01, is printed too)

Also prints the API requests of one repair by verb and resource (the controller's own
request counter, scraped from its metrics endpoint), the controller's CPU and peak RSS
(VmHWM), and beside them the API server's share: its CPU (and etcd's, kwok's, the
controller-manager's) during the repairs when the cluster is a local one (``autoclusters dev
up``), a node GET's round trip sampled every half second during the repairs, and the API
server's mean latency by verb from its own ``apiserver_request_duration_seconds``. Not a
timed test.

With ``--shards N --pools P`` (P >= N) the nodes are spread round-robin over P pools (named
so that the pools spread evenly over the shards), the faults evenly over the pools, and N
controller processes run ``--shards N --shard I``; CPU, requests and memory are summed over the
processes, and each shard's CPU is printed too.

With ``--karpenter`` (a cluster started with ``autoclusters dev up --karpenter``) the pool's
nodes are Karpenter's: a NodePool and a training-like Deployment (one 8-GPU worker per node)
make Karpenter launch ``--nodes`` nodes; the faults are DCGM row-remapping failures (a replace fault) and the
pool replaces through the karpenter provider. Per repair, from the same watch streams:

  karpenter  Draining (the worker is evicted; its replacement is Pending) -> the new node
             Ready: Karpenter's launch, with the old NodeClaim's deletion in the middle
  overhead   everything else of fault written -> Succeeded: report, decision, marking and
             cordon, then the controller noticing the new node and verifying it
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autoclusters import api
from autoclusters.clock import SystemClock, parse_iso, utc_iso
from autoclusters.controller.controller_config import ControllerConfig
from autoclusters.controller.shards import shard_of
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.crds import crds
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Conflict, Kube, KubeError, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.sim import nodes as sim
from autoclusters.sim.hosts import REBOOT_UNTIL

IDLE_WINDOW_S = 10.0  # the default of --idle-seconds
SETTLE_QUIET_S = 10.0  # the nodes changed nothing but their status this long: initialised
MESSAGE = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
REPLACE_MESSAGE = "GPU 2 reported DCGM_FR_ROW_REMAP_FAILURE."  # a replace fault (no Xid bucket replaces)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its threads included), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def profile_window(pid: int, out: str, sig: int) -> None:
    """Marks the start (SIGUSR1) or the end (SIGUSR2: the profile is written) of the profiled window."""
    if sig == signal.SIGUSR2:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out)
    os.kill(pid, sig)
    if sig == signal.SIGUSR2:
        deadline = time.monotonic() + 60
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"profile: {out} (python benchmarks/profile_summary.py {out})", flush=True)


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


def labels_of(key: str) -> dict[str, str]:
    """``name{a="1",b="2"}`` -> {"a": "1", "b": "2"} (label values without commas or quotes)."""
    inner = key.partition("{")[2].rstrip("}")
    return {k: v.strip('"') for k, _, v in (part.partition("=") for part in inner.split(",") if part)}


def requests_by_kind(metrics: dict[str, float]) -> dict[tuple[str, str, str], float]:
    """(component, verb, resource) -> requests so far, from the controller's metric."""
    out = {}
    for key, value in metrics.items():
        if key.startswith("autoclusters_controller_api_requests_total{"):
            labels = labels_of(key)
            out[(labels.get("component", "controller"), labels["verb"], labels["resource"])] = value
    return out


def reconciles_by_kind(metrics: dict[str, float]) -> dict[str, float]:
    """kind (node, pool) -> reconciles so far, from the controller's metric (absent before it existed)."""
    return {labels_of(k).get("kind", ""): v for k, v in metrics.items()
            if k.startswith("autoclusters_reconciles_total{")}


def control_plane_pids(kubeconfig: str) -> dict[str, int]:
    """Component name -> pid of the local cluster (``autoclusters dev up``) this kubeconfig is
    the admin kubeconfig of; empty for any other cluster."""
    from autoclusters.devcluster import processes
    from autoclusters.devcluster.cluster import LocalCluster

    path = Path(kubeconfig).resolve()
    if path.name != "kubeconfig":
        return {}
    cluster = LocalCluster(path.parent.name, root=path.parent.parent)
    return {p.name: p.pid for p in cluster.procs() if processes.alive(p)}


def apiserver_metrics(kubeconfig: str) -> str:
    """The API server's /metrics text, read with the kubeconfig's credentials (client
    certificate or token, CA file or data); "" when it cannot be read."""
    import base64
    import ssl
    import tempfile

    import yaml

    doc = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == doc.get("current-context"))
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
    user = next((u.get("user") or {} for u in doc.get("users") or [] if u["name"] == ctx.get("user")), {})
    tmp = Path(tempfile.mkdtemp(prefix="bench-kubeconfig-"))

    def file_of(key: str) -> str | None:
        if user.get(f"{key}-data") or cluster.get(f"{key}-data"):
            path = tmp / key
            path.write_bytes(base64.b64decode(user.get(f"{key}-data") or cluster.get(f"{key}-data")))
            return str(path)
        value = user.get(key) or cluster.get(key)
        return str(Path(kubeconfig).parent / value) if value else None

    context = ssl.create_default_context(cafile=file_of("certificate-authority"))
    cert, key = file_of("client-certificate"), file_of("client-key")
    if cert and key:
        context.load_cert_chain(cert, key)
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    req = urllib.request.Request(cluster["server"].rstrip("/") + "/metrics", headers=headers)
    try:
        return str(urllib.request.urlopen(req, context=context, timeout=30).read().decode())
    except OSError:
        return ""


def apiserver_latency(kubeconfig: str) -> dict[str, tuple[float, float]]:
    """verb -> (sum of seconds, count) of the API server's apiserver_request_duration_seconds
    (watches and other long-running requests left out); empty when /metrics is not readable."""
    text = apiserver_metrics(kubeconfig)
    out: dict[str, list[float]] = {}
    for key, value in parse_metrics(text).items():
        for suffix, i in (("_sum{", 0), ("_count{", 1)):
            if key.startswith("apiserver_request_duration_seconds" + suffix):
                verb = labels_of(key).get("verb", "")
                if verb in ("WATCH", "CONNECT", ""):
                    continue
                out.setdefault(verb, [0.0, 0.0])[i] += value
    return {verb: (v[0], v[1]) for verb, v in out.items()}


class Sampler(threading.Thread):
    """Times one node GET every ``every`` seconds until stopped: the API server's pace during the run."""

    def __init__(self, kube: Kube, node: str, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.kube, self.node, self.every = kube, node, every
        self.stop = threading.Event()
        self.rtt: list[float] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            with contextlib.suppress(KubeError):
                self.kube.get_node(self.node)
                self.rtt.append(time.monotonic() - t)
            self.stop.wait(max(0.0, self.every - (time.monotonic() - t)))


class CpuSeries(threading.Thread):
    """A process's CPU rate (CPU-seconds per second) over each second until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.rates: list[float] = []

    def run(self) -> None:
        cpu, t = cpu_seconds(self.pid), time.monotonic()
        while not self.stop.wait(1.0):
            with contextlib.suppress(OSError):
                now_cpu, now = cpu_seconds(self.pid), time.monotonic()
                self.rates.append((now_cpu - cpu) / (now - t))
                cpu, t = now_cpu, now


def changed_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """The leaf paths where two versions of an object differ; list items by position, conditions
    by their type (``status.conditions[Ready].lastHeartbeatTime``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in old.keys() | new.keys():
            out += changed_paths(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            tag = a.get("type", i) if isinstance(a, dict) else i
            out += changed_paths(a, b, f"{path}[{tag}]")
        return out
    return [] if old == new else [path]


class NodeChanges:
    """Counts node watch events while ``counting`` and what each changed against the version seen
    before it: the load the controller's node informer carries while nothing is repaired."""

    def __init__(self) -> None:
        self.counting = False
        self.events = 0
        self.changed: collections.Counter[str] = collections.Counter()
        self.settling = 0  # changes of a node's labels or spec (its initialisation), counted always
        self._last: dict[str, dict[str, Any]] = {}
        self._last_change = time.monotonic()
        self._lock = threading.Lock()

    def last_change(self) -> float:
        with self._lock:
            return self._last_change

    def see(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        before = self._last.pop(name, None) if kind == "DELETED" else self._last.get(name)
        if kind != "DELETED":
            self._last[name] = obj
        if before is None or kind != "MODIFIED":
            paths = {kind}
        else:
            paths = {re.sub(r"\[\d+\]", "[]", p) for p in changed_paths(before, obj)} - {
                "metadata.resourceVersion", "kind", "apiVersion"}  # a listed item has no kind, a watched one has
        if any(p.startswith(("metadata.labels", "spec")) for p in paths):
            self.settling += 1
            with self._lock:
                self._last_change = time.monotonic()
        if self.counting:
            self.events += 1
            self.changed.update(paths)


class Watcher(threading.Thread):
    """Watches a collection and calls ``on`` with (monotonic time, event type, object)."""

    def __init__(self, kube: Kube, path: str, selector: str | None, on: Any) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.selector, self.on = kube, path, selector, on
        self.stop = threading.Event()

    def run(self) -> None:
        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    items, rv = self.kube.list_with_version(self.path, label_selector=self.selector)
                    for obj in items:
                        self.on(time.monotonic(), "ADDED", obj)
                for ev in self.kube.watch(self.path, resource_version=rv, label_selector=self.selector,
                                          timeout_seconds=60):
                    if self.stop.is_set():
                        return
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        self.on(time.monotonic(), ev["type"], obj)
            except KubeError:
                rv = ""
                time.sleep(0.5)


def controller_identity(handle: ClusterHandle, namespace: str, run_id: str,
                        expiration: int = 7200) -> tuple[list[dict[str, Any]], str]:
    """The controller's RBAC (deploy/controller.py; cluster-wide objects named for this run) applied
    in ``namespace``, and a kubeconfig of its service account: the objects, to clean up, and its path."""
    rbac = controller_rbac(handle.names, namespace=namespace)
    for obj in rbac:
        if obj["kind"].startswith("Cluster"):
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{run_id}"
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] = obj["metadata"]["name"]
    handle.apply(rbac)
    return rbac, handle.service_account_kubeconfig(namespace, "autoclusters-controller", expiration=expiration)



def cleared_gpu_condition(names: Names) -> dict[str, Any]:
    """The stand-in detector's nodes/status patch once a node rebooted: the GPU condition False."""
    now = utc_iso(SystemClock().now())
    return {"status": {"conditions": [{
        "type": names.gpu_condition, "status": "False", "reason": "NoGpuFaultDetected",
        "message": "No GPU fault detected.", "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--reset-seconds", type=float, default=5.0, help="simulated provider's reset time")
    ap.add_argument("--workers", type=int, default=ControllerConfig().workers,
                    help="controller workers (default: the controller's own default)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="leave the pool, nodes and records behind")
    ap.add_argument("--controller-source", default="",
                    help="run the controller from this checkout (e.g. a git worktree of an older commit), so two "
                         "controllers are compared with the same benchmark and cluster")
    ap.add_argument("-o", "--output", default="", help="also write the results as JSON here")
    ap.add_argument("--karpenter", action="store_true",
                    help="nodes launched by Karpenter (dev up --karpenter); replace faults through its provider")
    ap.add_argument("--shards", type=int, default=1,
                    help="controller processes, each --shards N --shard I (sharding by pool; default 1)")
    ap.add_argument("--pools", type=int, default=1,
                    help="pools the nodes and the faults are spread over (at least --shards; default 1)")
    ap.add_argument("--profile", default="",
                    help="run the controller under benchmarks/profiled.py (cProfile in every thread, CPU time) and "
                         "write the profile of the repairs (first fault to last success) here; read it with "
                         "benchmarks/profile_summary.py. Slows the controller: its latencies are not comparable")
    ap.add_argument("--profile-idle", default="",
                    help="as --profile, but the profiled window is the idle one before the faults (--idle-seconds): "
                         "where the controller's CPU goes while nothing is repaired")
    ap.add_argument("--idle-seconds", type=float, default=IDLE_WINDOW_S,
                    help="length of the idle window before the faults, over which the controller's idle CPU rate "
                         "and the node watch's events are measured")
    ap.add_argument("--settle-timeout", type=float, default=300,
                    help="at most this long after the nodes are Ready, wait for their labels and spec to settle")
    args = ap.parse_args()
    if args.profile and args.profile_idle:
        ap.error("--profile and --profile-idle profile one window each: give one of them")
    if args.shards < 1 or args.pools < args.shards:
        ap.error("--pools must be at least --shards, and --shards at least 1")
    if args.karpenter and args.pools > 1:
        ap.error("--karpenter runs one pool")
    if (args.profile or args.profile_idle) and args.shards > 1:
        ap.error("--profile and --profile-idle profile one controller process (--shards 1)")
    idle_s = args.idle_seconds

    handle = ClusterHandle(args.kubeconfig, local=True)
    kube, names = handle.kube, handle.names
    run_id = secrets.token_hex(3)
    pool, namespace = f"bench-{run_id}", f"bench-{run_id}"
    pools = [pool] if args.pools == 1 else [spread_name(pool, j, args.shards) for j in range(args.pools)]
    if args.karpenter:
        print(f"pool {pool}: {args.nodes} Karpenter nodes, {args.faults} replace faults", flush=True)
    else:
        print(f"pool {pool}: {args.nodes} nodes, {args.faults} faults, reset {args.reset_seconds}s", flush=True)
    handle.apply(crds(names))
    with contextlib.suppress(Conflict):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    rbac, sa_kubeconfig = controller_identity(handle, namespace, run_id)
    pool_path = Kube.custom_path(names.api_group, api.VERSION, "gpunodepools")
    provider: dict[str, Any] = {"type": "simulated", "simulated": {"resetSeconds": args.reset_seconds}}
    if args.karpenter:
        provider["replace"] = {"type": "karpenter"}
    for name in pools:
        kube.create(pool_path, {"apiVersion": f"{names.api_group}/{api.VERSION}", "kind": "GpuNodePool",
                                "metadata": {"name": name},
                                "spec": {"consentMode": "auto", "maxConcurrentRepairs": args.faults,
                                         "provider": provider}})
    if args.pools > 1:
        print("pools (shard): " + ", ".join(f"{p} ({shard_of(p, args.shards)})" for p in pools), flush=True)
    in_pools = f"in ({','.join(pools)})"

    t0 = time.monotonic()
    if args.karpenter:
        node_names = karpenter_nodes(handle, pool, namespace, args.nodes)
    else:
        node_names = [f"{pool}-{i}" for i in range(args.nodes)]
        pool_of = {n: pools[i % len(pools)] for i, n in enumerate(node_names)}
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda n: sim.create_gpu_node(kube, n, pool_of[n], names), node_names))
    deadline = time.monotonic() + max(300.0, args.nodes * 0.15)
    while time.monotonic() < deadline:
        ready = sum(node_ready(n) for n in kube.list_nodes(f"{names.pool_label} {in_pools}"))
        if ready == args.nodes:
            break
        time.sleep(1)
    print(f"{args.nodes} nodes Ready in {time.monotonic() - t0:.1f}s", flush=True)

    # --- measurement -------------------------------------------------------------------------
    lock = threading.Lock()
    fault_at: dict[str, float] = {}
    boot_seen: dict[str, float] = {}
    reboot_end: dict[str, float] = {}  # faulty node -> when the simulated reset's reboot is to end
    cordoned_at: dict[str, float] = {}  # faulty node -> first seen unschedulable after its fault
    cleared_at: dict[str, float] = {}
    detectors = ThreadPoolExecutor(max(1, min(64, args.faults)), thread_name_prefix="detector")
    record_first: dict[str, float] = {}
    phase_first: dict[tuple[str, str], float] = {}
    node_of: dict[str, str] = {}
    boots: dict[str, str] = {}
    ready_at: dict[str, float] = {}  # node -> first seen Ready (the Karpenter run's new nodes)
    not_ready: set[str] = set()  # nodes seen not Ready after the faults were raised
    reboots: dict[str, int] = {}  # node -> new bootIDs seen
    replacement_of: dict[str, str] = {}  # record -> its new node

    def on_record(t: float, _kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with lock:
            node_of[name] = obj["spec"]["node"]
            record_first.setdefault(name, t)
            ph = (obj.get("status") or {}).get("phase")
            if ph:
                phase_first.setdefault((name, ph), t)
            new = (obj.get("status") or {}).get("replacementNode")
            if new:
                replacement_of[name] = new

    idle_events = NodeChanges()

    def on_node(t: float, kind: str, obj: dict[str, Any]) -> None:
        idle_events.see(kind, obj)
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        if node_ready(obj):
            with lock:
                ready_at.setdefault(name, t)
        elif fault_at:
            not_ready.add(name)
        if name in fault_at and name not in cordoned_at and (obj.get("spec") or {}).get("unschedulable"):
            cordoned_at[name] = t
        if name in fault_at and name not in reboot_end:
            # The simulated provider's reset asks kwok's stages for a reboot that ends at this time
            # (its wall clock: the controller runs on this machine); kwok's lag past it is the
            # simulated host's, as a VM's boot and its kubelet's first status are a real host's.
            until = parse_iso((obj["metadata"].get("annotations") or {}).get(REBOOT_UNTIL))
            if until is not None:
                reboot_end[name] = until.timestamp() - (time.time() - time.monotonic())
        boot = ((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
        before = boots.get(name)
        boots[name] = boot
        if before and boot and before != boot:
            reboots[name] = reboots.get(name, 0) + 1
        if before and boot and before != boot and name in fault_at and name not in boot_seen:
            boot_seen[name] = t
            # Each node's detector reacts on its own node, side by side with the others': the
            # write goes to a pool, so this watch never waits on it and the next node's reboot
            # is seen when it comes (a write here made each reaction wait for the ones before it,
            # and that wait, not excluded, counted as the platform's).
            detectors.submit(clear_fault, name)

    stand_in_failed: dict[str, str] = {}  # node -> why the stand-in detector's write failed

    def clear_fault(name: str) -> None:
        try:
            kube.patch_node_status(name, cleared_gpu_condition(names))
        except KubeError as e:  # the pool would drop it: say so, and leave the node out of the phases
            stand_in_failed[name] = str(e)
            print(f"the stand-in detector could not clear {name}'s fault: {e}", flush=True)
            return
        cleared_at[name] = time.monotonic()

    rec_watch = Watcher(kube, Kube.custom_path(names.api_group, api.VERSION, "remediations"),
                        f"{names.api_group}/pool {in_pools}", on_record)
    node_watch = Watcher(kube, "/api/v1/nodes", f"{names.pool_label} {in_pools}", on_node)
    rec_watch.start()
    node_watch.start()
    # Fresh nodes are still being initialised (kube-controller-manager adds the beta os/arch labels and
    # takes the not-ready taint off, a few nodes a second): the idle window and the faults wait until
    # the pool's nodes have changed nothing but their status for SETTLE_QUIET_S.
    t_settle = time.monotonic()
    deadline = t_settle + args.settle_timeout
    while time.monotonic() < deadline and time.monotonic() - idle_events.last_change() < SETTLE_QUIET_S:
        time.sleep(0.5)
    print(f"the nodes' labels and spec settled {time.monotonic() - t_settle:.0f} s after Ready "
          f"({idle_events.settling} changes of them seen meanwhile)", flush=True)

    profile_out = os.path.abspath(args.profile or args.profile_idle) if (args.profile or args.profile_idle) else ""
    profiler = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiled.py"), profile_out] \
        if profile_out else []
    ports, procs, logs = [], [], []
    for shard in range(args.shards):
        port = free_port()
        argv = [sys.executable, *profiler, "-m", "autoclusters.cli.main", "controller", "run",
                "--kubeconfig", sa_kubeconfig, "--namespace", namespace, "--metrics-port", str(port),
                "--workers", str(args.workers)]
        if args.shards > 1:
            argv += ["--shards", str(args.shards), "--shard", str(shard)]
        suffix = f"-shard-{shard}" if args.shards > 1 else ""
        log = open(f"/tmp/controller-bench-{run_id}{suffix}.log", "wb")  # noqa: SIM115 - closed at the end
        ports.append(port)
        logs.append(log)
        env, cwd = None, None
        if args.controller_source:  # another checkout's controller, this benchmark and cluster
            # `python -m` puts the working directory first on sys.path: the checkout's own too
            cwd = os.path.abspath(args.controller_source)
            env = {**os.environ, "PYTHONPATH": cwd}
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                      env=env, cwd=cwd))
    proc = procs[0]  # the one profiled, and the one whose CPU is followed second by second

    def scrape_one(port: int) -> dict[str, float]:
        return parse_metrics(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    def scrape() -> dict[str, float]:
        """Every process's metrics, summed (the leader gauge too: N when every shard leads)."""
        total: dict[str, float] = {}
        for port in ports:
            for key, value in scrape_one(port).items():
                total[key] = total.get(key, 0.0) + value
        return total

    def cpu_of_all() -> list[float]:
        return [cpu_seconds(p.pid) for p in procs]

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if scrape().get("autoclusters_controller_leader") == args.shards:
                break
        time.sleep(0.3)
    led_at, led_cpu = time.monotonic(), sum(cpu_of_all())
    cpu_series = CpuSeries(proc.pid)  # its CPU each second from here to the faults
    cpu_series.start()
    time.sleep(3)  # the informers' initial lists
    deadline = time.monotonic() + 60
    while scrape().get("autoclusters_workqueue_depth", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)  # the start-up's reconciles of every node
    before_faults = scrape()
    base, reconciles_base = requests_by_kind(before_faults), reconciles_by_kind(before_faults)


    faulty = spread_faults(node_names, args.faults, len(pools))

    def raise_fault(node: str) -> None:
        now = utc_iso(SystemClock().now())
        kube.patch_node_status(node, {"status": {"conditions": [{
            "type": names.gpu_condition, "status": "True",
            "reason": "NvidiaDCGMError" if args.karpenter else "NvidiaXIDError",
            "message": REPLACE_MESSAGE if args.karpenter else MESSAGE,
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        fault_at[node] = time.monotonic()

    rtt = []
    for node in node_names[:20]:  # the API server's own pace right now: a reference for every number below
        t = time.monotonic()
        kube.get_node(node)
        rtt.append(time.monotonic() - t)
    plane = control_plane_pids(args.kubeconfig)
    idle_before = {name: cpu_seconds(pid) for name, pid in plane.items()}
    if args.profile_idle:
        profile_window(proc.pid, args.profile_idle, signal.SIGUSR1)
    ctl_idles_before, idle_start = cpu_of_all(), time.monotonic()
    ctl_idle_before = sum(ctl_idles_before)
    idle_events.counting = True
    time.sleep(idle_s)  # the load before the faults: heartbeats, informers, the leader's lease
    idle_events.counting = False
    plane_before = {name: cpu_seconds(pid) for name, pid in plane.items()}
    plane_idle = {name: (plane_before[name] - idle_before[name]) / idle_s for name in plane}
    idle_span = time.monotonic() - idle_start
    ctl_idles = [(now - then) / idle_span for now, then in zip(cpu_of_all(), ctl_idles_before, strict=True)]
    ctl_idle = sum(ctl_idles)  # CPU-seconds per second, all processes
    idle_elapsed = time.monotonic() - idle_start
    cpu_series.stop.set()
    if args.profile_idle:
        profile_window(proc.pid, args.profile_idle, signal.SIGUSR2)
    latency_before = apiserver_latency(args.kubeconfig)
    sampler = Sampler(kube, node_names[-1])
    sampler.start()
    if args.profile:
        profile_window(proc.pid, args.profile, signal.SIGUSR1)
    cpus_before = cpu_of_all()
    start = time.monotonic()
    with ThreadPoolExecutor(min(32, args.faults)) as ex:
        list(ex.map(raise_fault, faulty))
    print(f"{len(faulty)} faults raised in {time.monotonic() - start:.2f}s", flush=True)

    deadline = time.monotonic() + args.timeout
    done: dict[str, str] = {}
    while time.monotonic() < deadline:
        with lock:
            done = {node_of[r]: r for (r, ph) in phase_first if ph == "Succeeded"}
        if len(done) >= len(faulty):
            break
        time.sleep(0.5)
    elapsed = time.monotonic() - start
    cpus_used = [now - then for now, then in zip(cpu_of_all(), cpus_before, strict=True)]
    cpu_used = sum(cpus_used)
    plane_cpu = {}
    for name, pid in plane.items():
        with contextlib.suppress(OSError):
            plane_cpu[name] = cpu_seconds(pid) - plane_before[name]
    sampler.stop.set()
    latency_after = apiserver_latency(args.kubeconfig)
    if args.profile:
        profile_window(proc.pid, args.profile, signal.SIGUSR2)
    load = os.getloadavg()[0]
    at_end = scrape()
    after, reconciles_after = requests_by_kind(at_end), reconciles_by_kind(at_end)
    hwms_kb = []
    for p in procs:
        with open(f"/proc/{p.pid}/status") as f:
            hwms_kb.append(next(int(line.split()[1]) for line in f if line.startswith("VmHWM")))
    hwm_kb = sum(hwms_kb)

    if args.karpenter:
        result = karpenter_report(args, faulty, done, fault_at, record_first, phase_first, replacement_of,
                                  ready_at, elapsed)
    detectors.shutdown(wait=False)
    report, startp, act, verify, total, reaction = [], [], [], [], [], []
    host_lag, total_with_host = [], []
    # What NVSentinel, the strongest open peer, publishes: ~2.5 nodes cordoned a second.
    to_cordon = [cordoned_at[n] - fault_at[n] for n in faulty if n in cordoned_at and n in fault_at]
    cordon_span = max((cordoned_at[n] for n in faulty if n in cordoned_at), default=start) - start
    cordon_rate = len(to_cordon) / cordon_span if cordon_span > 0 else 0.0
    unmeasured = []  # succeeded, but this benchmark missed its reboot or its own clearing write
    for node in faulty if not args.karpenter else []:
        r = done.get(node)
        if not r:
            continue
        if node not in boot_seen or node not in cleared_at:
            unmeasured.append(node)
            continue
        t_rec = record_first[r]
        t_act = phase_first.get((r, "Acting"), phase_first.get((r, "Verifying")))
        t_ver = phase_first.get((r, "Verifying"), t_act)
        t_ok = phase_first[(r, "Succeeded")]
        detector = cleared_at[node] - boot_seen[node]
        reaction.append(detector)
        # The simulated host's own lag: the reset's end it was asked for -> its new boot id seen.
        host = boot_seen[node] - reboot_end[node] if node in reboot_end else 0.0
        host_lag.append(host)
        host = max(0.0, host)
        report.append(t_rec - fault_at[node])
        if t_act is not None and t_ver is not None:
            startp.append(t_act - t_rec)
            act.append(max(0.0, t_ver - t_act - args.reset_seconds - host))
        verify.append(max(0.0, t_ok - cleared_at[node]))
        total.append(t_ok - fault_at[node] - args.reset_seconds - detector - host)
        total_with_host.append(total[-1] + host)

    by_kind = {k: v - base.get(k, 0.0) for k, v in after.items() if v - base.get(k, 0.0) > 0}
    requests = sum(by_kind.values())
    repairs = max(1, len(done))
    records_of: dict[str, set[str]] = {}
    for r, n in node_of.items():
        records_of.setdefault(n, set()).add(r)
    doubled_records = sorted(n for n in faulty if len(records_of.get(n, ())) > 1)  # the controller's
    doubled_reboots = sorted(n for n in faulty if reboots.get(n, 0) > 1)  # the provider's (or the simulator's)
    doubled = sorted({*doubled_records, *doubled_reboots})
    unfaulted_not_ready = sorted(not_ready - set(faulty))
    mean_latency = {}
    for verb, (total_s, count) in latency_after.items():
        s0, c0 = latency_before.get(verb, (0.0, 0.0))
        if count - c0 > 0:
            mean_latency[verb] = {"mean_s": (total_s - s0) / (count - c0), "requests": count - c0}
    rows = [("report", report), ("start", startp), ("act", act), ("verify", verify), ("total", total)]
    if not args.karpenter:
        print(f"\n{len(done)}/{len(faulty)} repairs succeeded in {elapsed:.1f}s "
              f"(reset time {args.reset_seconds}s excluded below)")
        print(f"{'phase':<8} {'p50 s':>8} {'p99 s':>8} {'max s':>8}")
        for label, values in rows:
            print(f"{label:<8} {pct(values, 0.5):8.3f} {pct(values, 0.99):8.3f} "
                  f"{max(values or [float('nan')]):8.3f}")
        print(f"(excluded from total: the stand-in detectors' reaction, new boot id seen -> condition False "
              f"written, p50 {pct(reaction, 0.5):.3f} s, p99 {pct(reaction, 0.99):.3f} s;")
        print(f" and the simulated host's lag, the reset's end it was asked for -> its new boot id seen, "
              f"p50 {pct(host_lag, 0.5):.3f} s, p99 {pct(host_lag, 0.99):.3f} s, min "
              f"{min(host_lag or [float('nan')]):.3f} s ({len(reboot_end)} reboot ends read);")
        print(f" total with the host's lag, as before 2026-12-01: p50 {pct(total_with_host, 0.5):.3f} s, "
              f"p99 {pct(total_with_host, 0.99):.3f} s)")
    if not args.karpenter:
        if to_cordon:
            print(f"fault written -> node cordoned: p50 {pct(to_cordon, 0.5):.3f} s, p99 {pct(to_cordon, 0.99):.3f} s; "
                  f"{len(to_cordon)} faulty nodes cordoned {cordon_span:.2f} s after the first fault was raised "
                  f"({cordon_rate:.1f} nodes a second)")
        if unmeasured:
            print(f"left out of the phases, succeeded without a reboot seen or the stand-in's write done: "
                  f"{len(unmeasured)} {unmeasured[:10]} (write errors: {len(stand_in_failed)})")
        print(f"faulty nodes with more than one record: {len(doubled_records)} {doubled_records[:10]}; "
              f"with more than one reboot: {len(doubled_reboots)} {doubled_reboots[:10]}")
        print(f"nodes without a fault seen NotReady during the run: {len(unfaulted_not_ready)} "
              f"{unfaulted_not_ready[:10]}")
    by_component: dict[str, float] = {}
    for (component, _, _), count in by_kind.items():
        by_component[component] = by_component.get(component, 0.0) + count
    print(f"\nAPI requests per repair: {requests / repairs:.1f} (total {int(requests)}); by the part of the "
          "controller that sent them: " + ", ".join(f"{c} {k / repairs:.2f}" for c, k in sorted(
              by_component.items(), key=lambda kv: -kv[1])))
    print("by part, verb and resource:")
    for (component, verb, resource), count in sorted(by_kind.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0])):
        print(f"  {count / repairs:6.2f}  {component:<20} {verb:<8} {resource}")
    if reconciles_after:
        print("reconciles per repair (node keys, pool keys): " + ", ".join(
            f"{kind} {(n - reconciles_base.get(kind, 0.0)) / repairs:.2f}"
            for kind, n in sorted(reconciles_after.items())))
    else:
        print("reconciles per repair: not exported by this controller (autoclusters_reconciles_total)")
    print(f"controller peak RSS: {hwm_kb / 1024:.1f} MiB" + (
        f" (sum of {args.shards} processes: {', '.join(f'{k / 1024:.1f}' for k in hwms_kb)})" if args.shards > 1
        else ""))
    print(f"controller CPU during the repairs: {cpu_used:.2f} s ({cpu_used / repairs * 1000:.1f} ms per "
          f"repair); machine load average {load:.1f} on {os.cpu_count()} CPUs")
    net = max(0.0, cpu_used - ctl_idle * elapsed)
    print(f"controller CPU in the {idle_s:.0f} s before the faults: {ctl_idle * 1000:.1f} ms per second "
          f"(the fleet's heartbeats, the lease); during the repairs above that rate: {net:.2f} s "
          f"({net / repairs * 1000:.1f} ms per repair)")
    if args.shards > 1:
        for shard, (used, idle) in enumerate(zip(cpus_used, ctl_idles, strict=True)):
            print(f"  shard {shard}: CPU during the repairs {used:.2f} s, before the faults {idle * 1000:.1f} ms "
                  f"per second, above that rate {max(0.0, used - idle * elapsed):.2f} s")
    which = " (shard 0's per second; the start-up total is every shard's)" if args.shards > 1 else ""
    print(f"controller CPU from leading to the faults ({idle_start - led_at:.0f} s of start-up before the idle "
          f"window){which}, ms per second: " + " ".join(f"{r * 1000:.0f}" for r in cpu_series.rates)
          + f" (start-up total {(ctl_idle_before - led_cpu) * 1000:.0f} ms)")
    print(f"node watch events in the idle window: {idle_events.events} ({idle_events.events / idle_elapsed:.2f} "
          f"per second), what they changed (fields, the resourceVersion left out): " + (", ".join(
              f"{path} {n}" for path, n in idle_events.changed.most_common(12)) or "nothing"))
    if plane_cpu:
        print(f"control plane CPU in the {idle_s:.0f} s before the faults (% of one CPU): " + ", ".join(
            f"{name} {share * 100:.0f}%" for name, share in sorted(plane_idle.items())))
        print("control plane CPU during the repairs (s; % of one CPU over the run): " + ", ".join(
            f"{name} {sec:.1f} ({sec / elapsed * 100:.0f}%)" for name, sec in sorted(plane_cpu.items())))
    rtt_run = sampler.rtt
    print(f"node GET: {pct(rtt, 0.5) * 1000:.0f} ms p50 of 20 before the faults; during the repairs "
          f"p50 {pct(rtt_run, 0.5) * 1000:.0f} ms, p99 {pct(rtt_run, 0.99) * 1000:.0f} ms, "
          f"max {max(rtt_run or [float('nan')]) * 1000:.0f} ms ({len(rtt_run)} samples)")
    if mean_latency:
        print("API server mean latency during the repairs, by verb (apiserver_request_duration_seconds): " +
              ", ".join(f"{verb} {v['mean_s'] * 1000:.0f} ms ({int(v['requests'])})"
                        for verb, v in sorted(mean_latency.items())))
    if not args.karpenter:
        result = {"nodes": args.nodes, "faults": len(faulty), "succeeded": len(done), "elapsed_s": elapsed,
                  "reset_seconds": args.reset_seconds,
                  "phases": {label: {"p50": pct(v, 0.5), "p99": pct(v, 0.99), "max": max(v or [0])}
                             for label, v in rows},
                  "detector_reaction_excluded": {"p50": pct(reaction, 0.5), "p99": pct(reaction, 0.99)},
                  "host_lag_excluded": {"p50": pct(host_lag, 0.5), "p99": pct(host_lag, 0.99),
                                        "min": min(host_lag or [0.0])},
                  "total_with_host_lag": {"p50": pct(total_with_host, 0.5), "p99": pct(total_with_host, 0.99)},
                  "unmeasured": unmeasured, "stand_in_failed": stand_in_failed,
                  "to_cordon": {"p50": pct(to_cordon, 0.5), "p99": pct(to_cordon, 0.99), "nodes": len(to_cordon),
                                "span_s": cordon_span, "nodes_per_s": cordon_rate}}
    result |= {"workers": args.workers, "shards": args.shards, "pools": args.pools,
              "controller_cpu_s_by_shard": cpus_used, "controller_idle_cpu_per_s_by_shard": ctl_idles,
              "peak_rss_mib_by_shard": [k / 1024 for k in hwms_kb],
              "doubled": doubled, "doubled_records": doubled_records,
              "doubled_reboots": doubled_reboots, "unfaulted_not_ready": unfaulted_not_ready,
              "heartbeats": heartbeats_of(args.kubeconfig),
              "api_requests_per_repair": requests / repairs,
              "api_requests_per_repair_by_component": {c: n / repairs for c, n in by_component.items()},
              "api_requests_by_kind": [{"component": component, "verb": verb, "resource": resource, "total": n,
                                        "per_repair": n / repairs}
                                       for (component, verb, resource), n in sorted(by_kind.items(),
                                                                                    key=lambda kv: -kv[1])],
              "peak_rss_mib": hwm_kb / 1024,
              "controller_cpu_s": cpu_used, "controller_cpu_per_repair_ms": cpu_used / repairs * 1000,
              "controller_idle_cpu_per_s": ctl_idle, "idle_seconds": idle_elapsed,
              "controller_cpu_per_s_after_leading": cpu_series.rates,
              "idle_node_events": idle_events.events, "idle_node_events_per_s": idle_events.events / idle_elapsed,
              "idle_node_event_changes": dict(idle_events.changed),
              "controller_cpu_per_repair_above_idle_ms": net / repairs * 1000,
              "control_plane_cpu_s": plane_cpu, "control_plane_cpu_share_before_faults": plane_idle,
              "apiserver_cpu_s": plane_cpu.get("kube-apiserver"),
              "get_node_p50_s": pct(rtt, 0.5),
              "get_node_during_run_s": {"p50": pct(rtt_run, 0.5), "p99": pct(rtt_run, 0.99),
                                        "max": max(rtt_run or [float("nan")]), "samples": len(rtt_run)},
              "apiserver_mean_latency_by_verb": mean_latency,
              "load_average": load, "cpus": os.cpu_count()}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2)

    rec_watch.stop.set()
    node_watch.stop.set()
    for p in procs:
        os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(15)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
    for log in logs:
        log.close()
    if not args.keep:
        if args.karpenter:
            _quiet(kube.delete, f"/apis/karpenter.sh/v1/nodepools/{pool}")  # Karpenter removes its nodes
        for name in pools:
            cleanup(kube, names, name, namespace, rbac)
    return 0 if len(done) == len(faulty) else 1


def heartbeats_of(kubeconfig: str) -> dict[str, Any] | None:
    """The node heartbeat settings of the local cluster behind this kubeconfig, if it is one."""
    from autoclusters.devcluster.cluster import LocalCluster

    path = Path(kubeconfig).resolve()
    if path.name != "kubeconfig":
        return None
    hb = (LocalCluster(path.parent.name, root=path.parent.parent).state() or {}).get("heartbeats")
    return dict(hb) if hb else None


def karpenter_nodes(handle: ClusterHandle, pool: str, namespace: str, count: int) -> list[str]:
    """A NodePool named after the pool and ``count`` one-node workers: Karpenter launches the nodes."""
    from autoclusters.demo.story import training_workload
    from autoclusters.devcluster.local_karpenter import NODE_CLASS, nodepool_manifest

    kube, names = handle.kube, handle.names
    try:
        kube.get(f"/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses/{NODE_CLASS}")
    except KubeError as e:
        raise SystemExit(f"--karpenter needs Karpenter on the cluster (autoclusters dev up --karpenter): {e}") from e
    handle.apply(nodepool_manifest(pool, pool, names), field_manager="benchmark")
    workload = [o for o in training_workload(names.pool_label, pool, count, namespace=namespace)
                if o["kind"] != "Namespace"]
    for obj in workload:
        if obj["kind"] == "PodDisruptionBudget":
            obj["spec"]["maxUnavailable"] = count  # the faults are drained at once, as the other run
    handle.apply(workload, field_manager="benchmark")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        nodes = [n for n in kube.list_nodes(f"karpenter.sh/nodepool={pool}") if node_ready(n)]
        if len(nodes) >= count:
            return sorted(n["metadata"]["name"] for n in nodes)
        time.sleep(2)
    raise SystemExit(f"Karpenter launched fewer than {count} Ready nodes within 600s")


def karpenter_report(args: argparse.Namespace, faulty: list[str], done: dict[str, str], fault_at: dict[str, float],
                     record_first: dict[str, float], phase_first: dict[tuple[str, str], float],
                     replacement_of: dict[str, str], ready_at: dict[str, float], elapsed: float) -> dict[str, Any]:
    rows: dict[str, list[float]] = {k: [] for k in ("report", "drain", "karpenter", "notice", "total", "overhead")}
    for node in faulty:
        r = done.get(node)
        new = replacement_of.get(r or "")
        if not r or not new or new not in ready_at:
            continue
        t_f, t_rec, t_ok = fault_at[node], record_first[r], phase_first[(r, "Succeeded")]
        t_drain = phase_first.get((r, "Draining"), t_rec)
        t_act = phase_first.get((r, "Acting"), t_drain)
        t_new = ready_at[new]
        karp = max(0.0, t_new - t_drain)
        rows["report"].append(t_rec - t_f)
        rows["drain"].append(t_act - t_drain)
        rows["karpenter"].append(karp)
        rows["notice"].append(max(0.0, t_ok - max(t_new, t_act)))
        rows["total"].append(t_ok - t_f)
        rows["overhead"].append((t_ok - t_f) - karp)
    print(f"\n{len(done)}/{len(faulty)} replacements through Karpenter succeeded in {elapsed:.1f}s")
    print(f"{'part':<10} {'p50 s':>8} {'p99 s':>8} {'max s':>8}")
    for label, values in rows.items():
        print(f"{label:<10} {pct(values, 0.5):8.3f} {pct(values, 0.99):8.3f} {max(values or [float('nan')]):8.3f}")
    return {"nodes": args.nodes, "faults": len(faulty), "succeeded": len(done), "elapsed_s": elapsed,
            "karpenter": True,
            "parts": {label: {"p50": pct(v, 0.5), "p99": pct(v, 0.99), "max": max(v or [0])}
                      for label, v in rows.items()}}


def spread_name(base: str, j: int, shards: int) -> str:
    """Pool ``j``'s name: ``<base>-<j>-<k>`` with the first ``k`` that puts it on shard ``j mod shards``,
    so P pools spread over the shards as evenly as P allows (random names might all land on one)."""
    k = 0
    while shard_of(name := f"{base}-{j}-{k}", shards) != j % shards:
        k += 1
    return name


def spread_faults(node_names: list[str], faults: int, pools: int) -> list[str]:
    """``faults`` nodes spread evenly over the fleet and over the pools (node i is in pool i mod pools)."""
    per_pool = [node_names[j::pools] for j in range(pools)]
    out = []
    for j, members in enumerate(per_pool):
        count = faults // pools + (1 if j < faults % pools else 0)
        out += members[:: max(1, len(members) // max(1, count))][:count]
    return out


def cleanup(kube: Kube, names: Any, pool: str, namespace: str, rbac: list[dict[str, Any]]) -> None:
    nodes = kube.list_nodes(f"{names.pool_label}={pool}")
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda n: _quiet(kube.delete, f"/api/v1/nodes/{n['metadata']['name']}"), nodes))
    rec_path = Kube.custom_path(names.api_group, api.VERSION, "remediations")
    for r in kube.list_items(rec_path, label_selector=f"{names.api_group}/pool={pool}"):
        _quiet(kube.delete, f"{rec_path}/{r['metadata']['name']}")
    _quiet(kube.delete, Kube.custom_path(names.api_group, api.VERSION, "gpunodepools", pool))
    _quiet(kube.delete, f"/api/v1/namespaces/{namespace}")
    for obj in rbac:
        if obj["kind"].startswith("Cluster"):
            _quiet(kube.delete, f"/apis/rbac.authorization.k8s.io/v1/{obj['kind'].lower()}s/{obj['metadata']['name']}")


def _quiet(fn: Any, *a: Any) -> None:
    with contextlib.suppress(NotFound, KubeError):
        fn(*a)


if __name__ == "__main__":
    sys.exit(main())
