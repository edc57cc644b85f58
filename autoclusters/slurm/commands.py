"""Talking to Slurm through its own commands: ``sinfo``, ``squeue``, ``scontrol``, ``scancel``.

Why the commands and not slurmrestd's REST API: the commands are on every Slurm
installation and authenticate with the cluster's munge key, while slurmrestd is a separate
daemon that needs JWT authentication configured in slurmctld and changes its URL and
payloads with every Slurm release (v0.0.38 in 22.05, removed three releases later). The
outputs read here are chosen to be stable across releases: ``sinfo``/``squeue`` with an
explicit ``--Format`` field list and a ``|`` separator (never the human tables, never
``scontrol show node -o``, whose ``OS=`` and ``Reason=`` values contain spaces). Every
command runs with a timeout; a failure raises ``SlurmError`` with the command's stderr.

Node states: Slurm prints a base state and flags, e.g. ``mixed+drain``. A node is DRAINED
(safe to reset) when the DRAIN flag is set and nothing runs on it any more: base state not
ALLOCATED/MIXED and no COMPLETING flag. ``DRAINING`` is the same flag with jobs still there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autoclusters.pools.slurm_policy import SignalTarget

_BUSY_BASES = frozenset({"allocated", "mixed", "completing"})
_NODE_FIELDS = "NodeList:|,StateComplete:|,User:|,Timestamp:|,Reason:"
_JOB_FIELDS = "JobID:|,State:|,Requeue:|,RestartCnt:|,BatchFlag:|,NodeList:"
# Job states in which a job still holds (or is about to hold) its nodes.
ACTIVE_JOB_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
                               "RESIZING", "STAGE_OUT"})
PENDING_JOB_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out; the message holds the command and its stderr."""


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """Runs one command; the real one is ``SubprocessRunner``, unit tests pass a fake."""

    def __call__(self, argv: Sequence[str], timeout: float) -> Result: ...


@dataclass(frozen=True)
class SubprocessRunner:
    env: Mapping[str, str] = field(default_factory=dict)  # e.g. SLURM_CONF

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        try:
            # Slurm prints what it was given (a drain reason typed in another encoding): bytes
            # that are not UTF-8 are replaced, never an error that fails every poll
            p = subprocess.run(list(argv), capture_output=True, encoding="utf-8", errors="replace", timeout=timeout,
                               check=False, env={**os.environ, **self.env}, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"`{' '.join(argv)}` did not answer within {timeout:.0f}s") from None
        except OSError as e:
            raise SlurmError(f"`{argv[0]}` could not run: {e}") from None
        return Result(p.returncode, p.stdout, p.stderr)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # the base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # lower case: drain, completing, not_responding, ...
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""

    @property
    def drain(self) -> bool:
        """The DRAIN flag is set (draining or drained)."""
        return "drain" in self.flags or self.state in ("drained", "draining")

    @property
    def busy(self) -> bool:
        return self.state in _BUSY_BASES or "completing" in self.flags or self.state == "draining"

    @property
    def drained(self) -> bool:
        """DRAINED: drain set and no job allocated, mixed or completing on it any more."""
        return self.drain and not self.busy

    def describe(self) -> str:
        return "+".join([self.state.upper(), *sorted(f.upper() for f in self.flags)])


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # upper case: RUNNING, PENDING, COMPLETED, FAILED, ...
    requeue: bool
    restarts: int
    batch: bool
    nodes: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def pending(self) -> bool:
        return self.state in PENDING_JOB_STATES


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Parses ``sinfo -N -h -O NodeList:|,StateComplete:|,User:|,Timestamp:|,Reason:`` output.
    A node in several partitions is listed once per partition: the first line wins."""
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) < 5:
            raise SlurmError(f"unexpected sinfo line: {line!r}")
        name, state_complete, user, when, reason = (x.strip() for x in parts)
        if name in out:
            continue
        words = [w for w in state_complete.lower().split("+") if w]
        base = words[0].rstrip("*~#!%$@^-") if words else "unknown"
        flags = frozenset(w.rstrip("*~#!%$@^-") for w in words[1:])
        if state_complete.endswith("*"):
            flags |= {"not_responding"}
        reason = "" if reason in ("none", "(null)") else reason
        out[name] = SlurmNode(name, base, flags, reason, "" if user == "Unknown" else user,
                              "" if when == "Unknown" else when)
    return out


def parse_jobs(text: str) -> list[SlurmJob]:
    """Parses ``squeue -h -O JobID:|,State:|,Requeue:|,RestartCnt:|,BatchFlag:|,NodeList:`` output."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [x.strip() for x in line.split("|", 5)]
        if len(parts) < 6:
            raise SlurmError(f"unexpected squeue line: {line!r}")
        job_id, state, requeue, restarts, batch, nodes = parts
        jobs.append(SlurmJob(job_id, state.upper(), requeue == "1", int(restarts) if restarts.isdigit() else 0,
                             batch == "1", nodes))
    return jobs


@dataclass
class Slurm:
    """The handful of Slurm operations the bridge needs."""

    run: Runner = field(default_factory=SubprocessRunner)
    timeout: float = 15.0

    def _call(self, *argv: str) -> str:
        r = self.run(argv, self.timeout)
        if r.returncode != 0:
            detail = (r.stderr or r.stdout).strip() or f"exit code {r.returncode}"
            raise SlurmError(f"`{' '.join(argv)}` failed: {detail}")
        return r.stdout

    # --- reading ---------------------------------------------------------------------------
    def nodes(self, names: Iterable[str] | None = None) -> dict[str, SlurmNode]:
        argv = ["sinfo", "-N", "-h", "-O", _NODE_FIELDS]
        wanted = sorted(set(names or ()))
        if wanted:
            argv += ["-n", ",".join(wanted)]
        return parse_nodes(self._call(*argv))

    def jobs_on(self, node: str) -> list[SlurmJob]:
        """The jobs that hold ``node`` now (running, completing, suspended)."""
        return parse_jobs(self._call("squeue", "-h", "-w", node, "-t", ",".join(sorted(ACTIVE_JOB_STATES)),
                                     "-O", _JOB_FIELDS))

    def jobs(self, job_ids: Iterable[str]) -> dict[str, SlurmJob]:
        """Those jobs in any state Slurm still remembers (finished ones for MinJobAge)."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        out = self.run(("squeue", "-h", "-t", "all", "-j", ",".join(ids), "-O", _JOB_FIELDS), self.timeout)
        # squeue fails when every listed job is gone from slurmctld's memory: none is known.
        if out.returncode != 0 and "Invalid job id" in (out.stderr or ""):
            return {}
        if out.returncode != 0:
            raise SlurmError(f"`squeue -j {','.join(ids)}` failed: {(out.stderr or out.stdout).strip()}")
        return {j.job_id: j for j in parse_jobs(out.stdout)}

    # --- acting ----------------------------------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        self._call("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        self._call("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def signal(self, job_id: str, signal: str, target: SignalTarget) -> None:
        scope = {SignalTarget.STEPS: [], SignalTarget.BATCH: ["--batch"], SignalTarget.ALL: ["--full"]}[target]
        self._call("scancel", f"--signal={signal}", *scope, job_id)

    def requeue(self, job_id: str) -> None:
        self._call("scontrol", "requeue", job_id)
