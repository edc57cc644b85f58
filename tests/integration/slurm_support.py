"""Real Slurm for tests: munged, slurmctld and slurmd daemons from the distribution's
packages, started in a temporary directory (devcluster/slurm.py), stopped after the test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.devcluster import processes as p
from autoclusters.devcluster.slurm import LocalSlurm, SlurmMissing, SlurmSettings, locate
from autoclusters.slurm.commands import Slurm, SubprocessRunner
from tests.conftest import tool_missing

REPO = Path(__file__).resolve().parents[2]
TRAINING = REPO / "examples" / "training"


class SlurmHarness:
    def __init__(self, local: LocalSlurm, procs: list[p.Proc]) -> None:
        self.local = local
        self.procs = procs
        self.slurm = Slurm(SubprocessRunner(local.env()), timeout=20)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**os.environ, **self.local.env()}, capture_output=True, text=True,
                              timeout=30, check=check)

    def sbatch(self, *argv: str, env: dict[str, str] | None = None) -> str:
        out = subprocess.run(["sbatch", "--parsable", *argv], env={**os.environ, **self.local.env(), **(env or {})},
                             capture_output=True, text=True, timeout=30, check=True)
        return out.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> Any:
        return self.slurm.jobs([job_id]).get(job_id)


def slurm_harness(tmp_path: Path, nodes: tuple[str, ...]) -> Iterator[SlurmHarness]:
    try:
        locate()
    except SlurmMissing as e:
        tool_missing(str(e))
    local = LocalSlurm(tmp_path / "slurm", tmp_path / "logs")
    procs: list[p.Proc] = []
    try:
        local.start(SlurmSettings(nodes=nodes, cred_expire_seconds=5, kill_wait_seconds=30), procs,
                    progress=lambda m: print(f"[slurm] {m}", file=sys.stderr))
        yield SlurmHarness(local, procs)
    finally:
        local.cancel_all_jobs()
        for proc in reversed(procs):
            p.stop(proc)
        local.remove_runtime_dir()


def torchrun() -> str:
    """The torchrun of this Python environment; the test is skipped (or fails under
    AUTOCLUSTERS_REQUIRE_TRAINING=1) without the training extra."""
    path = Path(sys.executable).with_name("torchrun")
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("AUTOCLUSTERS_REQUIRE_TRAINING") == "1":
            pytest.fail("PyTorch is missing: make training")
        pytest.skip("PyTorch is not installed: make training (pip install .[training])")
    return str(path)


def events(path: Path) -> list[dict[str, Any]]:
    import json

    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
