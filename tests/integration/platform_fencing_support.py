"""Shared parts of the partition tests (test_platform_partition.py): repairs parked at named
phases, a replica's writes read from the API server's audit log, a controller behind a TCP
proxy, and the checks that every repair ended once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from autoclusters.allow_lists import FLAG as ALLOW_LISTS_FLAG
from tests.integration.controller_support import ControllerProcess, Env, hold_drain
from tests.integration.helpers import parse_time, wait_for
from tests.integration.tcp_proxy import TcpProxy
from tests.integration.test_controller_ha import assert_one_clean_reset, phase

USER_AGENT = "autoclusters-controller/{identity}"  # cli/controller.py: the replica's identity after the "/"


@dataclass
class Parked:
    """Three repairs, each held in a phase until ``release``: one awaiting approval (propose),
    one draining (a PodDisruptionBudget holds its pod), one acting (a long simulated reset)."""

    waiting: str
    draining: str
    acting: str
    namespace: str

    @property
    def nodes(self) -> tuple[str, str, str]:
        return self.waiting, self.draining, self.acting


def park(ctl: Env, ns: str, *, reset_seconds: int = 12) -> Parked:
    _, (waiting,) = ctl.pool("propose")
    _, (draining,) = ctl.pool("auto", drain={"resetDeadlineSeconds": 120, "replaceDeadlineSeconds": 120})
    _, (acting,) = ctl.pool("auto", provider={"type": "simulated", "simulated": {"resetSeconds": reset_seconds}})
    hold_drain(ctl.kube, ns, draining, "held")
    parked = Parked(waiting, draining, acting, ns)
    for node in parked.nodes:
        ctl.raise_fault(node)
    want = ["AwaitingApproval", "Draining", "Acting"]
    seen: list[list[str]] = []

    def all_parked() -> bool:
        seen.append([phase(ctl, x) for x in parked.nodes])
        return seen[-1] == want

    try:
        wait_for("all parked", all_parked, timeout=30, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; phases seen: {seen[-3:]}") from None
    return parked


def release(ctl: Env, parked: Parked) -> None:
    """The world moves on: the approval comes, the PDB allows the eviction."""
    ctl.approve(parked.waiting)
    ctl.kube.patch(f"/apis/policy/v1/namespaces/{parked.namespace}/poddisruptionbudgets/held",
                   {"spec": {"minAvailable": 0}})


def each_ends_once(ctl: Env, parked: Parked, timeout: float = 60) -> float:
    """Every parked repair Succeeded, once, with one reset each; returns when the last ended
    (monotonic)."""
    for node in parked.nodes:
        ctl.record_in(node, "Succeeded", timeout=timeout)
    done = time.monotonic()
    for node in parked.nodes:
        assert_one_clean_reset(ctl, node)
    return done


# --- who wrote what: the API server's audit log ------------------------------------------------
def audit_log(ctl: Env) -> Path:
    """The local cluster's audit log: this session's, or that of the ``autoclusters dev`` cluster
    whose kubeconfig AUTOCLUSTERS_TEST_KUBECONFIG names (its state folder holds both)."""
    dev = ctl.cluster.dev
    path = dev.audit_log if dev is not None else Path(ctl.cluster.kubeconfig).parent / "logs" / "audit.log"
    assert path.exists(), (f"no audit log at {path}: these tests need a local cluster (devcluster) whose "
                           f"API server audits writes")
    return path


def writes_by(ctl: Env, identity: str, *, after: datetime | None = None) -> list[dict[str, Any]]:
    """The audited writes of one replica (its user agent) but those of its lease, received
    after ``after``; in the order received."""
    agent = USER_AGENT.format(identity=identity)
    log = audit_log(ctl)
    out = []
    for path in sorted(log.parent.glob(log.stem + "*" + log.suffix)):  # the current file and a rotated one
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line being written
            if e.get("userAgent") != agent or (e.get("objectRef") or {}).get("resource") == "leases":
                continue
            received = parse_time(e["requestReceivedTimestamp"])
            if after is None or received > after:
                out.append(e)
    return sorted(out, key=lambda e: e["requestReceivedTimestamp"])


def describe(events: list[dict[str, Any]]) -> list[str]:
    return [f"{e['requestReceivedTimestamp']} {e['verb']} {e.get('requestURI')} -> "
            f"{(e.get('responseStatus') or {}).get('code')}" for e in events]


# --- a replica paused, a replica behind a proxy ----------------------------------------------------
@contextlib.contextmanager
def stopped(proc: ControllerProcess) -> Iterator[None]:
    """SIGSTOP: the process keeps its sockets and its threads, and runs nothing; resumed
    (SIGCONT) when the block ends, also when it fails."""
    os.kill(proc.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.proc.pid, signal.SIGCONT)


def proxied_kubeconfig(kubeconfig: str, proxy: TcpProxy, out: Path) -> str:
    """A copy of ``kubeconfig`` whose server is the proxy (same credentials, same CA: the API
    server's certificate is for 127.0.0.1, which the proxy listens on)."""
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://{proxy.address}"
    out.write_text(yaml.safe_dump(cfg))
    return str(out)


def api_port(kubeconfig: str) -> int:
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    server: str = cfg["clusters"][0]["cluster"]["server"]
    return int(server.rsplit(":", 1)[1].rstrip("/"))


def start_controller_with(ctl: Env, kubeconfig: str, identity: str) -> ControllerProcess:
    """Env.start_controller, with a kubeconfig of the test's (a proxied one)."""
    c = ControllerProcess(kubeconfig, ctl.namespace, ctl.log_dir, identity,
                          {ALLOW_LISTS_FLAG: ctl.allow_lists.flag_value()}, env=ctl.process_env())
    ctl.controllers.append(c)
    return c


def exited_lost_lease(c: ControllerProcess, timeout: float = 30) -> float:
    """The replica's positive sign that it saw it had lost the lease: its log line, then its
    exit with status 1 (so a supervisor restarts it); returns when it exited (monotonic)."""
    wait_for(f"{c.identity} to see it lost the lease", lambda: "lost the leadership" in c.log(), timeout=timeout)
    wait_for(f"{c.identity} to exit", lambda: c.proc.poll() is not None, timeout=timeout)
    assert c.proc.returncode == 1, (c.proc.returncode, c.log()[-2000:])
    return time.monotonic()
