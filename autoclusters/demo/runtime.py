"""The runtime processes on the host (controller, detector, webhook), each under the
service-account identity the stack created, with logs in the cluster's log folder."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autoclusters.deploy import (
    CONTROLLER_SERVICE_ACCOUNT,
    DEFAULT_NAMESPACE,
    DETECTOR_SERVICE_ACCOUNT,
    WEBHOOK_SERVICE_ACCOUNT,
)
from autoclusters.deploy.workloads import CONTROLLER, EVENT_SOURCE_ENV
from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.processes import Proc


@dataclass
class Runtime:
    handle: ClusterHandle
    logs: Path
    spool: Path
    cluster: LocalCluster | None = None
    namespace: str = DEFAULT_NAMESPACE
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    event_source: str = CONTROLLER

    def brand_env(self) -> dict[str, str]:
        """What the stack's Deployments set: every process uses the stack's names."""
        names = self.handle.names
        return {"AUTOCLUSTERS_DOMAIN": names.domain, "AUTOCLUSTERS_CONDITION_PREFIX": names.prefix,
                EVENT_SOURCE_ENV: self.event_source}

    def _start(self, name: str, args: list[str], service_account: str, node: str | None = None) -> None:
        kubeconfig = self.handle.service_account_kubeconfig(self.namespace, service_account, node=node,
                                                            expiration=7200)
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its life
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.brand_env()}
        proc = subprocess.Popen(
            [sys.executable, "-m", "autoclusters.cli.main", *args, "--kubeconfig", kubeconfig],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.procs[name] = proc
        if self.cluster is not None:  # `autoclusters dev down` stops it with the cluster
            self.cluster.adopt(Proc(name, proc.pid, sys.executable, str(self.logs / f"{name}.log")))

    def start_controller(self, *, sim_reset_seconds: float, sim_replace_seconds: float) -> None:
        self._start("controller", [
            "controller", "run", "--namespace", self.namespace, "--lease-seconds", "6",
            "--renew-deadline-seconds", "4", "--retry-period-seconds", "1", "--poll-seconds", "0.5",
            "--hold-recheck-seconds", "2", "--verify-timeout-seconds", "60", "--metrics-port", "0",
            "--sim-reset-seconds", str(sim_reset_seconds), "--sim-replace-seconds", str(sim_replace_seconds),
        ], CONTROLLER_SERVICE_ACCOUNT)

    def start_detectors(self, nodes: list[str], *, window_seconds: float,
                        hostnames: dict[str, str] | None = None) -> None:
        """One agent per node, as the DaemonSet runs them: each under a token bound to its own
        node, so the admission policy lets it write that node's conditions and nothing else.
        ``hostnames``: a node's ``kubernetes.io/hostname`` label where it is not its name
        (Karpenter's kwok nodes carry their NodeClaim's name there)."""
        for node in nodes:
            host = (hostnames or {}).get(node, node)
            self._start(f"detector-{node}", [
                "detector", "run", "--simulate", "--node-selector", f"kubernetes.io/hostname={host}",
                "--spool", str(self.spool), "--window", str(window_seconds), "--poll-interval", "0.5",
            ], DETECTOR_SERVICE_ACCOUNT, node=node)

    def start_webhook(self, *, port: int, opa_url: str, tls: tuple[Path, Path]) -> None:
        self._start("webhook", [
            "webhook", "run", "--listen", "127.0.0.1", "--port", str(port), "--opa-url", opa_url,
            # the stack's names (domain, controller identity) into OPA's data, as in the cluster
            "--namespace", self.namespace, "--push-opa-config",
            "--tls-cert", str(tls[0]), "--tls-key", str(tls[1]), "--webhook-config", "",
        ], WEBHOOK_SERVICE_ACCOUNT)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the webhook is not listening on 127.0.0.1:{port} after 30s")
            time.sleep(0.2)

    def check(self) -> None:
        """Fails loudly, with the log's tail, when a runtime process has died."""
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-20:]
                raise RuntimeError(f"the {name} exited with code {p.returncode}:\n" + "\n".join(tail))

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
