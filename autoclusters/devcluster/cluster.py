"""The local cluster: one state directory, one set of processes, one admin kubeconfig.

Layout of ``<state root>/<name>/``::

    state.json      pids, ports and binaries of the running components
    kubeconfig      admin (system:masters) kubeconfig
    kwok.yaml       kwok's configuration and node stages, with the node heartbeat settings
    pki/            throwaway CA, serving cert, service-account keys, client certs
    etcd/           etcd data
    slurm/          Slurm beside the cluster, when started with ``start_slurm`` (devcluster/slurm.py)
    nodes/<node>/   each real node's disk and configuration, when started with ``real_nodes``
                    (devcluster/realnodes.py)
    logs/<component>.log
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autoclusters.deploy.policy_bundle import policies_dir
from autoclusters.devcluster import local_karpenter, realnodes
from autoclusters.devcluster import processes as p
from autoclusters.devcluster.heartbeats import Heartbeats
from autoclusters.devcluster.pki import Pki
from autoclusters.devcluster.slurm import LocalSlurm, SlurmSettings
from autoclusters.devcluster.tools import Tools
from autoclusters.kube import NotFound, load_kube
from autoclusters.kube.objects import node_ready
from autoclusters.rego.opa import IGNORE
from autoclusters.sim.nodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE

Progress = Callable[[str], None]

# Client identities: file name -> (user, group)
CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    # the API server's identity towards kubelets (logs, exec, port-forward on the real nodes)
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The components ``LocalCluster.restart_component`` kills and starts again on the same ports and data.
RESTARTABLE = ("etcd", "kube-apiserver")


def state_root() -> Path:
    env = os.environ.get("AUTOCLUSTERS_STATE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "autoclusters" / "clusters"


def _noop(_: str) -> None:
    pass


# Writes by service accounts (the controllers under test run as one), at the Metadata level
# (who, what, when, the answer's code; no bodies), from the stage where the answer is known.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


class LocalCluster:
    def __init__(self, name: str = "dev", root: Path | None = None) -> None:
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ValueError(f"invalid cluster name {name!r}: use letters, digits, '-' and '_'")
        self.name = name
        self.dir = (root or state_root()) / name
        self.pki = Pki(self.dir / "pki")
        self.logs = self.dir / "logs"
        self.state_file = self.dir / "state.json"
        self.kubeconfig = self.dir / "kubeconfig"
        # Service accounts' writes, one JSON line each (metadata only): which replica of the
        # controller wrote what, and when (the write fencing test reads it).
        self.audit_log = self.logs / "audit.log"

    def _audit_flags(self) -> list[str]:
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-maxsize=64", "--audit-log-maxbackup=1"]

    # --- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def procs(self) -> list[p.Proc]:
        st = self.state() or {}
        return [p.Proc(**d) for d in st.get("procs", [])]

    def runtime_procs(self) -> list[p.Proc]:
        st = self.state() or {}
        return [p.Proc(**d) for d in st.get("runtime", [])]

    def slurm_procs(self) -> list[p.Proc]:
        st = self.state() or {}
        return [p.Proc(**d) for d in st.get("slurm", [])]

    @property
    def slurm(self) -> LocalSlurm:
        return LocalSlurm(self.dir / "slurm", self.logs)

    def start_slurm(self, settings: SlurmSettings, progress: Progress = _noop) -> LocalSlurm:
        """Starts munged, slurmctld and one slurmd per node of ``settings`` beside the running
        cluster; ``down`` stops them (after cancelling every job) with the rest."""
        if not self.is_running():
            raise p.StartError(f"cluster {self.name!r} is not running; start it first")
        if self.slurm_procs():
            self._stop_slurm(progress)
        slurm = self.slurm

        def record(proc: p.Proc) -> None:
            st = self.state() or {}
            st.setdefault("slurm", []).append(asdict(proc))
            self.state_file.write_text(json.dumps(st, indent=2))

        try:
            slurm.start(settings, [], progress, on_start=record)
        except BaseException:
            self._stop_slurm(_noop)
            raise
        st = self.state() or {}
        st["slurmConf"] = str(slurm.conf)
        self.state_file.write_text(json.dumps(st, indent=2))
        return slurm

    def _stop_slurm(self, progress: Progress) -> None:
        procs = self.slurm_procs()
        if any(p.alive(x) for x in procs):
            self.slurm.cancel_all_jobs()
        for proc in reversed(procs):
            if p.alive(proc):
                progress(f"stopping {proc.name} (pid {proc.pid})")
            p.stop(proc)
        if procs and not any(p.alive(x) for x in procs):
            self.slurm.remove_runtime_dir()
        st = self.state() or {}
        if "slurm" in st:
            st["slurm"] = [asdict(x) for x in procs if p.alive(x)]
            self.state_file.write_text(json.dumps(st, indent=2))

    def adopt(self, proc: p.Proc) -> None:
        """Records a process started beside the cluster (the demo's controller, detectors,
        webhook) so that ``down`` stops it with the cluster."""
        st = self.state() or {}
        st.setdefault("runtime", []).append(asdict(proc))
        self.state_file.write_text(json.dumps(st, indent=2))

    def add_component(self, proc: p.Proc, ports: dict[str, int]) -> None:
        """Records an optional component started after ``up`` (Karpenter) with the others:
        ``dev status`` lists it, ``down`` stops it, ``is_running`` watches it."""
        st = self.state() or {}
        st.setdefault("procs", []).append(asdict(proc))
        st.setdefault("ports", {}).update(ports)
        self.state_file.write_text(json.dumps(st, indent=2))

    def has_component(self, name: str) -> bool:
        return any(x.name == name and p.alive(x) for x in self.procs())

    def start_karpenter(self, progress: Progress = _noop) -> None:
        """Karpenter with its kwok cloud provider (see devcluster/local_karpenter.py); idempotent."""
        if self.has_component(local_karpenter.COMPONENT):
            progress("karpenter is already running")
            return
        if not self.is_running():
            raise p.StartError(f"cluster {self.name!r} is not running; start it first")
        proc, ports = local_karpenter.start_karpenter(self.dir, self.kubeconfig, self.logs, progress)
        self.add_component(proc, ports)

    def is_running(self) -> bool:
        procs = self.procs()
        return bool(procs) and all(p.alive(x) for x in procs)

    @property
    def opa_url(self) -> str | None:
        st = self.state() or {}
        port = (st.get("ports") or {}).get("opa")
        return f"http://127.0.0.1:{port}" if port else None

    @property
    def etcd_url(self) -> str | None:
        """etcd's client URL (its v3 HTTP/JSON gateway answers there too)."""
        st = self.state() or {}
        port = (st.get("ports") or {}).get("etcd")
        return f"http://127.0.0.1:{port}" if port else None

    def _save(self, procs: list[p.Proc], ports: dict[str, int], extra: dict[str, Any]) -> None:
        self.state_file.write_text(json.dumps(
            {"name": self.name, "procs": [asdict(x) for x in procs], "ports": ports, **extra}, indent=2))

    # --- up --------------------------------------------------------------------------------
    def up(self, progress: Progress = _noop, policies: Path | None = None,
           heartbeats: Heartbeats | None = None, real_nodes: int = 0) -> float:
        """Starts every component and waits until each is healthy. Returns seconds taken.
        ``heartbeats``: how often the simulated nodes renew their Lease and post their status
        (a kubelet's defaults when not given). ``real_nodes``: how many real kubelet nodes to
        boot beside the kwok nodes (devcluster/realnodes.py; none by default)."""
        if self.is_running():
            progress(f"cluster {self.name!r} is already running ({self.kubeconfig})")
            return 0.0
        if self.dir.exists():
            self.down(progress=_noop)  # a half-dead earlier run: clean it up first
        t0 = time.monotonic()
        heartbeats = heartbeats or Heartbeats()
        tools = Tools.locate()
        node_tools = realnodes.NodeTools.locate() if real_nodes else None
        self.logs.mkdir(parents=True, exist_ok=True)
        progress(f"creating certificates in {self.pki.dir}")
        self.pki.create(CLIENTS)
        names = ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok", "opa")
        ports = dict(zip(names, p.free_ports(len(names)), strict=True))
        self._write_kubeconfigs(ports["apiserver"])
        procs: list[p.Proc] = []
        try:
            self._start_all(tools, ports, procs, progress, policies or policies_dir(), heartbeats, bool(real_nodes))
            if node_tools is not None:
                self._start_real_nodes(real_nodes, tools, node_tools, ports, procs, progress, heartbeats)
        except BaseException:
            self._save(procs, ports, {})
            self.down(progress=_noop, keep_logs=True)
            raise
        took = time.monotonic() - t0
        self._save(procs, ports, {"kubeVersion": tools.kube_version, "startSeconds": round(took, 1),
                                  "heartbeats": asdict(heartbeats)})
        progress(f"cluster {self.name!r} is up in {took:.1f}s; kubeconfig: {self.kubeconfig}")
        return took

    def _start_real_nodes(self, count: int, tools: Tools, node_tools: realnodes.NodeTools, ports: dict[str, int],
                          procs: list[p.Proc], progress: Progress, heartbeats: Heartbeats) -> None:
        nodes = realnodes.prepare(self.name, self.dir, self.logs, self.pki, ports["apiserver"], count, node_tools,
                                  realnodes.default_image_archive(), heartbeats.status_seconds,
                                  heartbeats.lease_seconds, opa=tools.opa)
        machines = realnodes.start(nodes, self.dir, self.logs, progress)
        procs.extend(machines)
        self._save(procs, ports, {})
        kube = load_kube(str(self.kubeconfig), user_agent="autoclusters-dev")

        def ready(node: str) -> bool:
            try:
                return node_ready(kube.get_node(node))
            except NotFound:  # not registered yet: its kubelet is still starting
                return False

        t0 = time.monotonic()
        for node, machine in zip(nodes, machines, strict=True):  # a machine that dies is said at once
            try:  # one 180 s for all: they boot side by side
                p.wait_healthy(machine, functools.partial(ready, node.name), max(0.0, t0 + 180 - time.monotonic()),
                               progress)
            except p.StartError as e:
                kubelet = p.tail(str(self.logs / f"{node.name}-kubelet.log"))
                raise p.StartError(f"{e}\n--- {node.name} kubelet:\n{kubelet}") from e
        progress(f"  real nodes Ready after {time.monotonic() - t0:.1f}s: {', '.join(n.name for n in nodes)}")

    def real_nodes(self) -> list[realnodes.RealNode]:
        """The real nodes of this cluster (none unless started with ``real_nodes``)."""
        return realnodes.real_nodes(self.dir)

    def _start_all(self, tools: Tools, ports: dict[str, int], procs: list[p.Proc], progress: Progress,
                   policies: Path, heartbeats: Heartbeats, real_nodes: bool = False) -> None:
        d, pki = self.dir, self.pki
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def start(name: str, argv: list[str | Path], check: Callable[[], bool], timeout: float = 60) -> None:
            progress(f"starting {name}")
            proc = p.spawn(name, [str(a) for a in argv], self.logs, d)
            procs.append(proc)
            self._save(procs, ports, {})
            took = p.wait_healthy(proc, check, timeout, progress)
            progress(f"  {name} healthy after {took:.1f}s")

        etcd = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd_peer']}"
        start("etcd", [tools.etcd, "--name=default", f"--data-dir={d / 'etcd'}", f"--listen-client-urls={etcd}",
                       f"--advertise-client-urls={etcd}", f"--listen-peer-urls={peer}",
                       f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=default={peer}",
                       "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296"],
              self._health_check("etcd", ports))
        # With real nodes the API server is also reached from their network (kubelets, pods through
        # the `kubernetes` Service), and reaches webhook pods by their endpoints' addresses.
        network = (["--bind-address=0.0.0.0", f"--advertise-address={realnodes.HOST_IP}",
                    "--enable-aggregator-routing=true"] if real_nodes
                   else ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        start("kube-apiserver", [*self._apiserver_argv(tools, etcd, ports["apiserver"], network),
                                 *self._audit_flags()],
              self._health_check("kube-apiserver", ports), timeout=120)
        kcm_port, sched_port = ports["kcm"], ports["scheduler"]
        start("kube-controller-manager", [
            tools.kube_controller_manager, f"--kubeconfig={d / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={d / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={d / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1", f"--secure-port={kcm_port}", "--leader-elect=false",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}", f"--cluster-signing-key-file={pki.ca_key}",
            "--use-service-account-credentials=true", "--kube-api-qps=100", "--kube-api-burst=200",
            "--concurrent-gc-syncs=5", *heartbeats.controller_manager_flags(), "--v=1",
        ], lambda: p.http_ok(f"https://127.0.0.1:{kcm_port}/healthz", context=insecure))
        start("kube-scheduler", [
            tools.kube_scheduler, f"--kubeconfig={d / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={d / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={d / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}", "--leader-elect=false", "--v=1",
        ], lambda: p.http_ok(f"https://127.0.0.1:{sched_port}/healthz", context=insecure))
        stages = [heartbeats.write_kwok_config(d / "kwok.yaml"), *sorted(tools.kwok_stages.glob("*.yaml"))]
        kwok_port = ports["kwok"]
        start("kwok", [
            tools.kwok, f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}", "--node-ip=10.0.0.1",
            "--cidr=10.0.0.0/16", *heartbeats.kwok_flags(), f"--server-address=127.0.0.1:{kwok_port}",
            *[f"--config={s}" for s in stages],
        ], lambda: p.http_ok(f"http://127.0.0.1:{kwok_port}/healthz"))
        # The hosts of the simulated nodes: a reboot pod that completed on a kwok node reboots it.
        ready = d / "sim-hosts.ready"
        start("sim-hosts", [sys.executable, "-m", "autoclusters.sim.hosts", f"--kubeconfig={self.kubeconfig}",
                            f"--ready-file={ready}"], ready.exists)
        opa = f"http://127.0.0.1:{ports['opa']}"
        # Decision logs on: OPA then returns a decision_id, which the webhook logs per review.
        start("opa", [tools.opa, "run", "--server", f"--addr=127.0.0.1:{ports['opa']}", "--log-level=error",
                      "--set=decision_logs.console=true",
                      *opa_load_args(policies)],
              lambda: p.http_ok(f"{opa}/health"))

    def _apiserver_argv(self, tools: Tools, etcd: str, port: int, network: Sequence[str]) -> list[str | Path]:
        pki = self.pki
        kubelet_crt, kubelet_key = pki.client_cert("apiserver-kubelet-client")
        return [
            tools.kube_apiserver, f"--etcd-servers={etcd}", *network, f"--secure-port={port}",
            f"--kubelet-client-certificate={kubelet_crt}", f"--kubelet-client-key={kubelet_key}",
            "--kubelet-preferred-address-types=InternalIP",  # the real nodes' names are in no DNS
            f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}", "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}", f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16", "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true", "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
            "--profiling=false", "--event-ttl=1h", "--v=1",
        ]

    # --- a second cluster beside this one (a Cluster API management cluster, in the tests) ----
    def start_second_apiserver(self, name: str, progress: Progress = _noop, timeout: float = 120) -> Path:
        """Another kube-apiserver on this cluster's etcd, under a key prefix of its own
        (``--etcd-prefix=/NAME``): a second cluster, with its own objects, namespaces, RBAC and
        CRDs, for the cost of one process (no second etcd, no controller manager, scheduler or
        nodes). It trusts this cluster's CA, so this cluster's client certificates (``Pki.issue``)
        authenticate there too, as users of its own RBAC. Stopped with the cluster (``down``);
        idempotent. Returns its admin kubeconfig (``NAME.kubeconfig`` in the cluster's directory)."""
        component = f"kube-apiserver-{name}"
        kubeconfig = self.dir / f"{name}.kubeconfig"
        if self.has_component(component):
            return kubeconfig
        if not self.is_running():
            raise p.StartError(f"cluster {self.name!r} is not running; start it first")
        if not name or not all(c.isalnum() or c == "-" for c in name):
            raise ValueError(f"invalid API server name {name!r}: use letters, digits and '-'")
        ports = (self.state() or {}).get("ports") or {}
        (port,) = p.free_ports(1)
        tools = Tools.locate()
        argv = self._apiserver_argv(tools, f"http://127.0.0.1:{ports['etcd']}", port,
                                    ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        progress(f"starting {component}")
        proc = p.spawn(component, [str(a) for a in [*argv, f"--etcd-prefix=/{name}"]], self.logs, self.dir)
        self.add_component(proc, {component: port})
        self.pki.kubeconfig(kubeconfig, f"https://127.0.0.1:{port}", "admin", name)
        took = p.wait_healthy(proc, self._health_check("kube-apiserver", {"apiserver": port}), timeout, progress)
        progress(f"  {component} healthy after {took:.1f}s")
        return kubeconfig

    def _health_check(self, name: str, ports: dict[str, int]) -> Callable[[], bool]:
        """The check that a restartable component (``RESTARTABLE``) is healthy: etcd's /health,
        the API server's /readyz (as the admin: every check passed)."""
        if name == "etcd":
            return lambda: p.http_ok(f"http://127.0.0.1:{ports['etcd']}/health", expect=b'"true"')
        if name == "kube-apiserver":
            ca_ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
            admin_crt, admin_key = self.pki.client_cert("admin")
            ca_ctx.load_cert_chain(str(admin_crt), str(admin_key))
            return lambda: p.http_ok(f"https://127.0.0.1:{ports['apiserver']}/readyz", context=ca_ctx)
        raise ValueError(f"no restart for component {name!r}: only {', '.join(RESTARTABLE)}")

    # --- a component crashed and started again (the platform fault tests) ------------------
    def kill_component(self, name: str) -> None:
        """SIGKILLs one running component of ``RESTARTABLE`` (a crash: no shutdown of its own) and
        waits until it is gone; ``start_component`` starts it again."""
        self._health_check(name, {})  # refuses a component that cannot be started again
        proc = self._component(name)
        if not p.alive(proc):
            raise p.StartError(f"{name} of cluster {self.name!r} is not running")
        p.kill(proc)

    def start_component(self, name: str, progress: Progress = _noop, timeout: float = 120,
                        flags: Sequence[str] = ()) -> float:
        """Starts a component ``kill_component`` stopped with the command line it had (the same
        ports, data directory and certificates), plus ``flags`` (after the others, so they win;
        kept for its next start); waits until it is healthy and returns the seconds that took."""
        check = self._health_check(name, (self.state() or {}).get("ports") or {})
        old = self._component(name)
        if p.alive(old):
            raise p.StartError(f"{name} of cluster {self.name!r} is still running (pid {old.pid})")
        if not old.argv:
            raise p.StartError(f"{name} of cluster {self.name!r} was started without a recorded command line")
        progress(f"starting {name} again")
        proc = p.spawn(name, [*old.argv, *flags], self.logs, self.dir)
        st = self.state() or {}
        st["procs"] = [asdict(proc) if d.get("name") == name else d for d in st.get("procs", [])]
        self.state_file.write_text(json.dumps(st, indent=2))
        took = p.wait_healthy(proc, check, timeout, progress)
        progress(f"  {name} healthy again after {took:.1f}s")
        return took

    def restart_component(self, name: str, progress: Progress = _noop, timeout: float = 120) -> float:
        """``kill_component`` then ``start_component``: a crash and a restart on the same ports
        and data; returns the seconds from the start until healthy."""
        self.kill_component(name)
        return self.start_component(name, progress, timeout)

    def _component(self, name: str) -> p.Proc:
        found = [x for x in self.procs() if x.name == name]
        if not found:
            raise p.StartError(f"cluster {self.name!r} has no {name}")
        return found[-1]

    def _write_kubeconfigs(self, api_port: int) -> None:
        server = f"https://127.0.0.1:{api_port}"
        for file_name, target in (("admin", self.kubeconfig),
                                  ("controller-manager", self.dir / "controller-manager.kubeconfig"),
                                  ("scheduler", self.dir / "scheduler.kubeconfig")):
            self.pki.kubeconfig(target, server, file_name, self.name)

    # --- down ------------------------------------------------------------------------------
    def down(self, progress: Progress = _noop, keep_logs: bool = False) -> bool:
        """Stops every component (newest first) and removes the state. False if none existed."""
        existed = self.dir.exists()
        self._stop_slurm(progress)
        procs = self.runtime_procs() + self.slurm_procs() + self.procs()
        for proc in [*reversed(self.runtime_procs()), *reversed(self.procs())]:
            if p.alive(proc):
                progress(f"stopping {proc.name} (pid {proc.pid})")
            p.stop(proc)
        left = [x.name for x in procs if p.alive(x)]
        if left:
            raise p.StartError(f"could not stop: {', '.join(left)}")
        if self.real_nodes():
            realnodes.remove_bridge()
        if existed:
            if keep_logs:
                for child in self.dir.iterdir():
                    if child.name != "logs":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
        return existed


def opa_load_args(policies: Path) -> list[str]:
    """What ``opa run`` loads: the policy bundle, without its tests."""
    return [*(f"--ignore={p}" for p in IGNORE), str(policies)]
