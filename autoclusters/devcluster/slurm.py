"""Real Slurm beside the local cluster: munged, slurmctld and one ``slurmd -N <node>`` per
simulated GPU node, all on this host, from the distribution's packages.

Nothing global is touched: munged runs with its own key, socket, pid and seed files in the
state directory, and ``slurm.conf`` points Slurm at that socket (``AuthInfo=socket=``), so
several local clusters (and a system Slurm) can live side by side. Every Slurm node has
``NodeHostname=localhost`` and its own ``Port=``; spool directories and pid files carry the
node's name (``%n``). Layout of ``<cluster dir>/slurm/``::

    slurm.conf      the configuration (clients find it through SLURM_CONF)
    munge/          key, socket, pid and seed of this cluster's munged
    ctld/           slurmctld's StateSaveLocation

and, because Unix socket paths are limited to 108 bytes, ``$TMPDIR/acslurm-<hash>/`` holds
munged's socket and each slurmd's spool (``spool/<node>/``, where job steps put theirs).

The daemons run in the foreground and log to standard error, which goes to the cluster's
``logs/`` directory beside the control plane's: ``slurmctld.log``, ``slurmd-<node>.log``
(munged keeps its own log in ``munge/munged.log``).

The plugins chosen need no cgroup setup and no accounting database: proctrack/linuxproc,
task/none, jobacct_gather/none, accounting_storage/none. ``JobRequeue=1`` makes batch
jobs requeueable by default; ``KillWait`` (seconds between SIGTERM and SIGKILL when Slurm
ends a job) is a parameter because it bounds the time a job has to save a checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoclusters.devcluster import processes as p

Progress = Callable[[str], None]
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "scancel", "sinfo", "srun")
PARTITION = "gpu"


class SlurmMissing(RuntimeError):
    """Slurm or munge is not installed; the message says how to install it."""


def _noop(_: str) -> None:
    pass


def locate() -> dict[str, str]:
    """The absolute paths of the Slurm and munge commands; raises SlurmMissing naming the absent ones."""
    found = {b: shutil.which(b) or shutil.which(b, path="/usr/sbin:/sbin:/usr/bin") for b in BINARIES}
    missing = [b for b, path in found.items() if not path]
    if missing:
        raise SlurmMissing(f"Slurm/munge commands not found: {', '.join(missing)}. "
                           "Install them with `make slurm` (Debian's slurmctld, slurmd, slurm-client and munge).")
    return {b: str(path) for b, path in found.items()}


@dataclass(frozen=True)
class SlurmSettings:
    nodes: tuple[str, ...]
    partition: str = PARTITION
    cpus_per_node: int = 2
    memory_mb_per_node: int = 2048
    kill_wait_seconds: int = 30
    cred_expire_seconds: int = 10


class LocalSlurm:
    """One Slurm cluster under ``<dir>``; its processes are returned to the caller to record."""

    def __init__(self, directory: Path, logs: Path) -> None:
        self.dir = directory
        self.logs = logs
        self.conf = directory / "slurm.conf"
        # Unix sockets (munged's, each job step's in the slurmd spool) must have paths under
        # 108 bytes, which a state directory deep in a test's tmp dir exceeds: they live in a
        # short directory of their own, named after the state directory.
        digest = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:10]
        self.run_dir = Path(tempfile.gettempdir()) / f"acslurm-{digest}"
        self.munge_socket = self.run_dir / "munge.socket"
        self.spool = self.run_dir / "spool"

    def remove_runtime_dir(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def env(self) -> dict[str, str]:
        """What a Slurm client command needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self, settings: SlurmSettings, ctld_port: int, node_ports: Sequence[int]) -> None:
        d = self.dir
        for sub in ("munge", "ctld"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self.spool.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)
        user = _user()
        lines = [
            "# Written by autoclusters' local cluster (autoclusters/devcluster/slurm.py).",
            "ClusterName=autoclusters",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire also sets how long Slurm holds a requeued batch job back (its BeginTime:
            # requeue time + cred_expire + 1); Slurm's default 120 s would dominate a short scenario.
            f"AuthInfo=socket={self.munge_socket},cred_expire={settings.cred_expire_seconds}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            f"StateSaveLocation={d / 'ctld'}",
            f"SlurmdSpoolDir={self.spool}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd'}-%n.pid",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "JobRequeue=1",
            f"KillWait={settings.kill_wait_seconds}",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            # A busy machine (a control plane, PyTorch start-ups) can take longer than Slurm's 10 s
            # default to start a job step; a timed-out launch requeues the job and holds it.
            "MessageTimeout=60",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "MinJobAge=600",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for node, port in zip(settings.nodes, node_ports, strict=True):
            lines.append(f"NodeName={node} NodeHostname=localhost Port={port} CPUs={settings.cpus_per_node} "
                         f"RealMemory={settings.memory_mb_per_node} State=UNKNOWN")
        lines.append(f"PartitionName={settings.partition} Nodes={','.join(settings.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        for node in settings.nodes:
            (self.spool / node).mkdir(parents=True, exist_ok=True)

    def start(self, settings: SlurmSettings, procs: list[p.Proc], progress: Progress = _noop,
              on_start: Callable[[p.Proc], None] | None = None) -> float:
        """Writes the configuration and starts munged, slurmctld and every slurmd; waits until
        each node answers. Started processes are appended to ``procs`` (and passed to
        ``on_start`` at once, so the caller can record them before any later step fails)."""
        bins = locate()
        t0 = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        ctld_port, *node_ports = p.free_ports(1 + len(settings.nodes))
        self.write_config(settings, ctld_port, node_ports)
        munge = self.dir / "munge"
        key = munge / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        munge.chmod(0o700)
        env = {**os.environ, **self.env()}

        def start(name: str, argv: list[str], check: Callable[[], bool], timeout: float = 60) -> None:
            progress(f"starting {name}")
            proc = p.spawn(name, argv, self.logs, self.dir, env=env)
            procs.append(proc)
            if on_start:
                on_start(proc)
            took = p.wait_healthy(proc, check, timeout, progress)
            progress(f"  {name} healthy after {took:.1f}s")

        start("munged", [bins["munged"], "--foreground", "--force", f"--key-file={key}",
                         f"--socket={self.munge_socket}", f"--pid-file={munge / 'munged.pid'}",
                         f"--seed-file={munge / 'munged.seed'}", f"--log-file={munge / 'munged.log'}"],
              lambda: self.munge_socket.exists())
        start("slurmctld", [bins["slurmctld"], "-D", "-f", str(self.conf)],
              lambda: self._run(bins["scontrol"], "ping").returncode == 0)
        for node in settings.nodes:
            start(f"slurmd-{node}", [bins["slurmd"], "-D", "-N", node, "-f", str(self.conf)],
                  functools.partial(self._node_up, bins["scontrol"], node))
        took = time.monotonic() - t0
        progress(f"slurm is up in {took:.1f}s: partition {settings.partition!r} with {', '.join(settings.nodes)}; "
                 f"SLURM_CONF={self.conf}")
        return took

    def cancel_all_jobs(self, timeout: float = 20) -> None:
        """Cancels every job and waits (bounded) until none runs, so no job step outlives its slurmd."""
        try:
            bins = locate()
        except SlurmMissing:
            return
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            jobs = self._run(bins["squeue"], "-h", "-o", "%A").stdout.split()
            if jobs:
                self._run(bins["scancel"], *jobs)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not self._run(bins["squeue"], "-h", "-t", "RUNNING,COMPLETING,SUSPENDED,CONFIGURING",
                                 "-o", "%A").stdout.split():
                    return
                time.sleep(0.5)

    def _run(self, binary: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, *args], env={**os.environ, **self.env()}, capture_output=True, text=True,
                              timeout=15, check=False)

    def _node_up(self, scontrol: str, node: str) -> bool:
        out = self._run(scontrol, "show", "node", node, "-o").stdout
        state = next((f.split("=", 1)[1] for f in out.split() if f.startswith("State=")), "")
        return bool(state) and not any(s in state for s in ("UNKNOWN", "DOWN", "NOT_RESPONDING"))


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
